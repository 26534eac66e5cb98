import type { FakeLaunch, FakeLibCuda } from './fakeLibCuda.js';
import { decodeFakeTensorMap } from './fakeTensorMap.js';
import { f32ToBits } from './floatBits.js';
import { type Compiled, compileEntry } from './interpreter/compiler.js';
import { SPECIAL_SLOT } from './interpreter/layout.js';
import { LaunchState } from './interpreter/memory.js';
import { type Entry, type Module, parseModule } from './interpreter/ptxModule.js';
import {
  AT_BARRIER,
  AT_SPIN,
  AT_WARP,
  BARRIER,
  EXITED,
  fail,
  RUNAWAY_STEPS,
  RUNNING,
  SharedMemory,
  SPIN,
  Thread,
  WARP,
  type WarpSite,
} from './interpreter/threads.js';
import type { Mbarriers } from './tensorCoreSemantics.js';

/**
 * Executes the PTX the builder emits against the fake libcuda's device
 * memory, so that kernels can be checked against the reference
 * implementations on a machine without a GPU.
 *
 * Each entry is compiled once per interpreter: every basic block becomes one
 * JavaScript function over pre-resolved register slots (interpreter/, one
 * file per concern: parsing, layout, the compiler and a lowering file per
 * instruction family), so a thread pays one call per block rather than a
 * dispatch per instruction. A thread's registers are one Uint32Array (with a
 * Float32Array over the same bytes, so moves between `%r` and `%f` keep every
 * bit): 16-bit registers hold their value zero-extended, 64-bit registers two
 * words (low first), predicates 0 or 1; immediates and special registers are
 * slots too, filled before a thread starts.
 *
 * Numerics: integer arithmetic wraps as in PTX; f32 arithmetic, fma, sqrt,
 * division and conversions are correctly rounded in every rounding mode;
 * `.approx` functions (ex2, lg2, rsqrt, sin, cos, tanh, and approximate
 * division and reciprocal) are modelled as correctly rounded, so hardware
 * differs by its documented error. `.ftz` flushes subnormal inputs and
 * results. Integer division by zero gives all ones and the remainder the
 * dividend (PTX leaves both unspecified; a hardware thread does not trap).
 *
 * Scheduling: a block's threads run one after another up to each `bar.sync`,
 * which is exactly the ordering a barrier guarantees. Warp-synchronous
 * instructions (shfl.sync, vote.sync, bar.warp.sync) are a meeting point of
 * the 32 lanes of a warp (lanes are consecutive linear thread indices): each
 * lane runs up to the instruction and posts its operands; once every live
 * lane of its membermask has arrived at the same instruction, all of them get
 * their results. Lanes that exited, and lanes past the end of a partial last
 * warp, take no part and do not hold up the others; a shfl that reads such a
 * lane (hardware-undefined) gets 0xffffffff, a NaN as f32 and -1 as an
 * integer, so that a kernel depending on it fails its checks. A lane of the
 * membermask waiting at a barrier or at another warp instruction is a
 * deadlock on hardware and an error here. Atomics are read-modify-writes in
 * this (sequentially consistent) order.
 *
 * Tensor cores (see tensorCoreSemantics.ts): `mma.sync` and `ldmatrix` are
 * warp-synchronous instructions of the whole warp; `cp.async` reads its
 * source when issued and writes shared memory when a `cp.async.wait_group`
 * or `wait_all` of the same thread retires its group. mbarriers live beside
 * shared memory (tensorCoreSemantics.ts); a `cp.async.bulk` lands at once and
 * completes its bytes on its mbarrier; a thread whose `mbarrier.try_wait`
 * finds the phase incomplete stops (as at a barrier) and polls again once
 * the others have run, and threads that poll with nothing changed are a
 * deadlock and an error.
 * `wgmma.mma_async` (wgmmaSemantics.ts) runs per warp, each warp computing
 * its 16 rows of D from K-major tiles at once; its fence, commit and wait
 * are no-ops.
 *
 * Memory: global accesses must fall inside one live allocation and be
 * naturally aligned (vectors to their whole size), shared accesses inside
 * the block's static plus dynamic shared memory, else the launch throws.
 * Shared memory starts zeroed in every block. Anything the builder does not
 * emit, or a form of an instruction it does not know, throws naming the line.
 */

// -------------------------------------------------------------- interpreter

export class PtxInterpreter {
  readonly #modules = new Map<string, Module>();
  readonly #compiled = new Map<string, Map<string, Compiled>>();
  readonly #state: LaunchState;
  /** Instructions executed, summed over threads. */
  executed = 0;

  constructor(private readonly fake: FakeLibCuda) {
    this.#state = new LaunchState(fake);
  }

  /** Makes the fake run every launch without a JS stand-in through this interpreter. */
  attach(): this {
    this.fake.executor = (image, launch) => this.run(image, launch);
    return this;
  }

  run(image: string, launch: FakeLaunch): void {
    let module = this.#modules.get(image);
    if (!module) {
      module = parseModule(image);
      this.#modules.set(image, module);
      this.#compiled.set(image, new Map());
    }
    const entry = module.entries.get(launch.entry) ?? fail(`no entry ${launch.entry}`);
    const byEntry = this.#compiled.get(image)!;
    let compiled = byEntry.get(launch.entry);
    if (!compiled) {
      compiled = compileEntry(entry, module, this.#state);
      byEntry.set(launch.entry, compiled);
    }
    if (launch.sharedBytes > 0 && module.dynamicShared.length === 0) {
      fail(`${launch.entry}: launched with dynamic shared memory but the module declares none`);
    }
    const state = this.#state;
    state.begin();
    state.params = paramWords(entry, launch);
    state.tensorMaps = entry.params.map((p) => {
      if (p.type !== 'tensorMap') return undefined;
      const name = p.name.slice(`${entry.name}_param_`.length);
      const bytes = launch.args[name];
      const map = bytes instanceof Uint8Array ? decodeFakeTensorMap(bytes) : undefined;
      return map ?? fail(`${entry.name}: parameter ${name} holds no tensor map the fake encoded`);
    });

    const [gx, gy, gz] = launch.grid;
    const [bx, by, bz] = launch.block;
    const threadsPerBlock = bx * by * bz;
    const template = compiled.template.slice();
    template[SPECIAL_SLOT['%ntid.x']!] = bx;
    template[SPECIAL_SLOT['%ntid.y']!] = by;
    template[SPECIAL_SLOT['%ntid.z']!] = bz;
    template[SPECIAL_SLOT['%nctaid.x']!] = gx;
    template[SPECIAL_SLOT['%nctaid.y']!] = gy;
    template[SPECIAL_SLOT['%nctaid.z']!] = gz;
    template[SPECIAL_SLOT['%nwarpid']!] = Math.ceil(threadsPerBlock / 32);
    template[SPECIAL_SLOT['%nsmid']!] = 1;
    const layout = compiled.layout;
    const sharedBytes =
      launch.sharedBytes > 0 ? layout.dynamicOffset + launch.sharedBytes : layout.staticSharedBytes;
    const shared = new SharedMemory(sharedBytes);
    const threads: Thread[] = [];
    for (let i = 0; i < threadsPerBlock; i++) {
      threads.push(new Thread(new Uint32Array(template.length), i, shared));
    }
    const block = new Block(threads, compiled, launch.entry, this);
    for (let cz = 0; cz < gz; cz++) {
      for (let cy = 0; cy < gy; cy++) {
        for (let cx = 0; cx < gx; cx++) {
          template[SPECIAL_SLOT['%ctaid.x']!] = cx;
          template[SPECIAL_SLOT['%ctaid.y']!] = cy;
          template[SPECIAL_SLOT['%ctaid.z']!] = cz;
          // Shared memory starts zeroed in every block (hardware leaves it undefined).
          shared.words.fill(0);
          shared.mbarriers.reset();
          for (const t of threads) {
            const u = t.u;
            u.set(template);
            const i = t.linear;
            const lane = i & 31;
            u[SPECIAL_SLOT['%tid.x']!] = i % bx;
            u[SPECIAL_SLOT['%tid.y']!] = Math.floor(i / bx) % by;
            u[SPECIAL_SLOT['%tid.z']!] = Math.floor(i / (bx * by));
            u[SPECIAL_SLOT['%laneid']!] = lane;
            u[SPECIAL_SLOT['%warpid']!] = i >>> 5;
            u[SPECIAL_SLOT['%lanemask_eq']!] = 1 << lane;
            u[SPECIAL_SLOT['%lanemask_lt']!] = (1 << lane) - 1;
            u[SPECIAL_SLOT['%lanemask_le']!] = lane === 31 ? 0xffffffff : (1 << (lane + 1)) - 1;
            u[SPECIAL_SLOT['%lanemask_ge']!] = ~((1 << lane) - 1);
            u[SPECIAL_SLOT['%lanemask_gt']!] = lane === 31 ? 0 : ~((1 << (lane + 1)) - 1);
            t.pc = 0;
            t.status = RUNNING;
            t.site = undefined;
            t.copies.reset();
          }
          block.run();
        }
      }
    }
  }

  /** Runs `t` from its pc until it stops; returns its new status. */
  execute(compiled: Compiled, t: Thread): number {
    const { blocks, lengths } = compiled;
    const u = t.u;
    const f = t.f;
    let pc = t.pc;
    let n = 0;
    for (;;) {
      const next = blocks[pc]!(u, f, t);
      n += lengths[pc]!;
      if (next >= 0) {
        pc = next;
        if (n >= RUNAWAY_STEPS) fail(`a thread ran ${n} instructions without stopping (stuck in a loop?)`);
        continue;
      }
      this.executed += n;
      return next === BARRIER ? AT_BARRIER : next === WARP ? AT_WARP : next === SPIN ? AT_SPIN : EXITED;
    }
  }
}

/** Each parameter's value as two little-endian words. */
function paramWords(entry: Entry, launch: FakeLaunch): Uint32Array {
  const words = new Uint32Array(entry.params.length * 2);
  const prefix = `${entry.name}_param_`;
  entry.params.forEach((p, i) => {
    const name = p.name.startsWith(prefix) ? p.name.slice(prefix.length) : p.name;
    const v = launch.args[name];
    if (v === undefined) fail(`no value for parameter ${name}`);
    if (v instanceof Uint8Array) return;
    if (typeof v === 'bigint') {
      const w = BigInt.asUintN(64, v);
      words[2 * i] = Number(w & 0xffffffffn);
      words[2 * i + 1] = Number(w >> 32n);
    } else if (p.type === 'f32') words[2 * i] = f32ToBits(v);
    else words[2 * i] = v;
  });
  return words;
}

/** One block's threads, scheduled warp by warp between barriers. */
class Block {
  readonly #lanes: (Thread | undefined)[] = new Array(32).fill(undefined);
  /** The mbarrier epoch when spinning threads last polled; -1 before they have. */
  #spinEpoch = -1;

  constructor(
    readonly threads: readonly Thread[],
    readonly compiled: Compiled,
    readonly entry: string,
    readonly interpreter: PtxInterpreter,
  ) {}

  /** The block's mbarriers, shared by all its threads. */
  get mbarriers(): Mbarriers {
    return this.threads[0]!.mbarriers;
  }

  run(): void {
    const threads = this.threads;
    this.#spinEpoch = -1;
    for (;;) {
      for (let w = 0; w < threads.length; w += 32) this.#runWarp(w, Math.min(w + 32, threads.length));
      if (!this.#releaseBarriers()) return;
    }
  }

  /**
   * Runs the lanes of the warp [w0, w1) until each has exited or reached a
   * barrier, meeting at every warp-synchronous instruction on the way.
   */
  #runWarp(w0: number, w1: number): void {
    const threads = this.threads;
    const lanes = this.#lanes;
    for (;;) {
      // Run every lane to its next stop; the first lane at a warp instruction names the meeting.
      let site: WarpSite | undefined;
      let mask = 0;
      let uniform = true;
      let arrived = 0;
      let live = 0;
      for (let i = w0; i < w1; i++) {
        const t = threads[i]!;
        if (t.status === RUNNING) t.status = this.interpreter.execute(this.compiled, t);
        lanes[i - w0] = undefined;
        if (t.status === EXITED) continue;
        const bit = 1 << (i - w0);
        live |= bit;
        if (t.status !== AT_WARP) continue;
        if (site === undefined) {
          site = t.site;
          mask = t.mask;
        }
        if (t.site === site) {
          arrived |= bit;
          lanes[i - w0] = t;
          if (t.mask !== mask) uniform = false;
        }
      }
      if (site === undefined) return;
      for (let i = w1 - w0; i < 32; i++) lanes[i] = undefined;
      // Usually every lane posts the same membermask, which then must cover exactly the live lanes that arrived.
      if (!uniform || (arrived & ~mask) !== 0 || (mask & live & ~arrived) !== 0)
        this.#checkMeeting(site, w0, live, arrived);
      site.complete(lanes);
      for (let lane = 0; lane < 32; lane++) {
        const t = lanes[lane];
        if (!t) continue;
        t.status = RUNNING;
        t.site = undefined;
      }
    }
  }

  /** Fails unless every lane at `site` is in its own membermask and every live lane of it arrived too. */
  #checkMeeting(site: WarpSite, w0: number, live: number, arrived: number): void {
    for (let lane = 0; lane < 32; lane++) {
      const t = this.#lanes[lane];
      if (!t) continue;
      if (((t.mask >>> lane) & 1) === 0) {
        fail(`${this.entry}: lane ${lane} is not in its own membermask: ${site.line}`);
      }
      const missing = t.mask & live & ~arrived;
      if (missing !== 0) {
        const other = this.threads[w0 + 31 - Math.clz32(missing & -missing)]!;
        const where = other.status === AT_WARP ? `at ${other.site!.line}` : 'at a barrier';
        fail(
          `${this.entry}: warp ${t.warp} deadlocks: lane ${lane} waits at ${site.line} for lane ${other.lane}, which waits ${where}`,
        );
      }
    }
  }

  /** Releases the threads of every complete barrier; false when all threads exited. */
  #releaseBarriers(): boolean {
    const threads = this.threads;
    let waiting = 0;
    let exited = 0;
    let spinning = 0;
    let wholeBlock = true;
    for (const t of threads) {
      if (t.status === EXITED) exited++;
      else if (t.status === AT_SPIN) spinning++;
      else if (t.status === AT_BARRIER) {
        waiting++;
        if (t.barrier !== 0 || t.barrierCount !== 0) wholeBlock = false;
      }
    }
    if (waiting === 0 && spinning === 0) return false;
    const released = waiting > 0 && this.#releaseBarrierGroups(wholeBlock, waiting);
    if (spinning > 0) return this.#resumeSpinning(released);
    if (!released) {
      fail(
        exited > 0
          ? `${this.entry}: ${exited} threads exited while others wait at a barrier`
          : `${this.entry}: threads wait at barriers that can never complete`,
      );
    }
    return true;
  }

  /**
   * Lets the threads polling an mbarrier (`try_wait` that found its phase
   * incomplete) poll again, unless nothing changed since they last did: no
   * barrier released anyone and no mbarrier moved, so none ever will.
   */
  #resumeSpinning(released: boolean): boolean {
    const epoch = this.mbarriers.epoch;
    if (!released && epoch === this.#spinEpoch) {
      fail(`${this.entry}: threads wait for mbarrier phases that can never complete`);
    }
    this.#spinEpoch = epoch;
    for (const t of this.threads) if (t.status === AT_SPIN) t.status = RUNNING;
    return true;
  }

  /** Releases every barrier whose thread count has arrived; whether any was. */
  #releaseBarrierGroups(wholeBlock: boolean, waiting: number): boolean {
    const threads = this.threads;
    // The common case: the whole block at `bar.sync 0`.
    if (wholeBlock && waiting === threads.length) {
      for (const t of threads) t.status = RUNNING;
      return true;
    }
    const counts = new Map<number, number>();
    for (const t of threads) {
      if (t.status === AT_BARRIER) counts.set(t.barrier, (counts.get(t.barrier) ?? 0) + 1);
    }
    let released = false;
    for (const [id, arrived] of counts) {
      let expected = 0;
      for (const t of threads) if (t.status === AT_BARRIER && t.barrier === id) expected = t.barrierCount;
      if (expected === 0) expected = threads.length;
      // A barrier with a thread count releases whole groups of that many, in thread order.
      let release = Math.floor(arrived / expected) * expected;
      if (release === 0) continue;
      released = true;
      for (const t of threads) {
        if (release === 0) break;
        if (t.status === AT_BARRIER && t.barrier === id) {
          t.status = RUNNING;
          release--;
        }
      }
    }
    return released;
  }
}
