import { AsyncCopyQueue, Mbarriers } from '../tensorCoreSemantics.js';

// A thread of a block: its registers, shared memory, and the signals with which it stops.

/** Block code returns the next pc, or one of these when the thread must stop. */
export const EXIT = -1;
export const BARRIER = -2;
export const WARP = -3;
/** A thread polled an mbarrier whose phase is not complete: others must run before it polls again. */
export const SPIN = -4;

/** A thread that runs this many instructions without stopping is taken to be stuck. */
export const RUNAWAY_STEPS = 2 ** 28;

/** The value a shfl reads from a lane that takes no part in it. */
export const INACTIVE_LANE_VALUE = 0xffffffff;

export const TWO32 = 4294967296;

/** One warp-synchronous instruction: computes every arrived lane's result at once. */
export interface WarpSite {
  readonly line: string;
  /** `lanes[i]` is lane i if it arrived here, else undefined. */
  complete(lanes: readonly (Thread | undefined)[]): void;
}

export const RUNNING = 0;
export const AT_BARRIER = 1;
export const AT_WARP = 2;
export const EXITED = 3;
export const AT_SPIN = 4;

export class Thread {
  pc = 0;
  status = RUNNING;
  /** Barrier id and expected thread count (0: the whole block) while at a barrier. */
  barrier = 0;
  barrierCount = 0;
  /** What the thread posted at a warp-synchronous instruction. */
  site: WarpSite | undefined = undefined;
  mask = 0;
  op0 = 0;
  op1 = 0;
  op2 = 0;
  readonly f: Float32Array;
  /** The block's shared memory, as words, floats and halves. */
  readonly shared32: Uint32Array;
  readonly sharedF32: Float32Array;
  readonly shared16: Uint16Array;
  readonly shared8: Uint8Array;
  readonly sharedBytes: number;
  /** This thread's cp.async copies not yet waited for. */
  readonly copies = new AsyncCopyQueue();
  readonly mbarriers: Mbarriers;

  constructor(
    readonly u: Uint32Array,
    /** Index in the block (x fastest); lane and warp follow from it. */
    readonly linear: number,
    shared: SharedMemory,
  ) {
    this.f = new Float32Array(u.buffer);
    this.shared32 = shared.words;
    this.sharedF32 = shared.floats;
    this.shared16 = shared.halves;
    this.shared8 = shared.octets;
    this.mbarriers = shared.mbarriers;
    this.sharedBytes = shared.bytes;
  }

  get lane(): number {
    return this.linear & 31;
  }

  get warp(): number {
    return this.linear >>> 5;
  }
}

export class SharedMemory {
  readonly words: Uint32Array;
  readonly floats: Float32Array;
  readonly halves: Uint16Array;
  readonly octets: Uint8Array;
  readonly mbarriers = new Mbarriers();

  constructor(readonly bytes: number) {
    const buffer = new ArrayBuffer(Math.ceil(bytes / 16) * 16);
    this.words = new Uint32Array(buffer);
    this.floats = new Float32Array(buffer);
    this.halves = new Uint16Array(buffer);
    this.octets = new Uint8Array(buffer);
  }
}

export function fail(message: string): never {
  throw new Error(`ptx interpreter: ${message}`);
}
