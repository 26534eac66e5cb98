import { fragmentElement, MMA_SHAPES, type MmaInputType, type MmaShape } from '@rayo/cuda-ptx';
import { bf16ToNumber, bitsToF32, f16ToNumber, f32ToBits } from './floatBits.js';

/**
 * What the PTX interpreter computes for the warp-collective tensor-core
 * instructions and the asynchronous copies, apart from the parsing and
 * register plumbing in ptxInterpreter.ts.
 *
 * `mma.sync`: the fragments of the 32 lanes are gathered into dense A, B and
 * C tiles by the fragment layout (mmaFragments.ts), D = A·B + C is computed
 * and scattered back. f16, bf16 and tf32 products are exact in a double; the
 * k products and C are summed in double precision and rounded to f32 once.
 * Hardware sums in an unspecified order with at least f32 precision, so a
 * result may differ from it in the last bits (tests compare with a
 * tolerance). tf32 operands use their upper 19 bits, as the tensor cores do.
 *
 * `ldmatrix` is defined from its own description (row addresses from lanes
 * 8i … 8i+7, lane l gets elements 2(l & 3), 2(l & 3) + 1 of row l >> 2),
 * independently of the mma layout table, so that a kernel feeding mma from
 * ldmatrix checks one against the other.
 *
 * `cp.async` copies wait in a per-thread queue of groups, and mbarriers keep
 * their arrivals, transaction bytes and phase in a per-block table.
 */

/** The value of one A or B element: `half` selects the upper 16 bits of a packed register. */
function inputValue(type: MmaInputType, word: number, half: number): number {
  switch (type) {
    case 'f16':
      return f16ToNumber(half ? word >>> 16 : word & 0xffff);
    case 'bf16':
      return bf16ToNumber(half ? word >>> 16 : word & 0xffff);
    default:
      // The tensor cores read a tf32 operand's sign, exponent and 10 mantissa bits.
      return bitsToF32(word & 0xffffe000);
  }
}

/** `cvt.rna.tf32.f32`: to nearest, ties away from zero, on the 13 low mantissa bits, which become 0. */
export function roundToTf32(bits: number): number {
  // A NaN becomes the canonical 0x7fc00000, as an H100 gives.
  if ((bits & 0x7f800000) === 0x7f800000) return (bits & 0x7fffff) === 0 ? bits : 0x7fc00000;
  // A carry out of the mantissa steps the exponent (up to infinity), as rounding should.
  return ((bits + 0x1000) & 0xffffe000) >>> 0;
}

/** Where each lane's fragment elements sit in the dense tiles, by shape (computed once). */
interface MmaLayout {
  /** Per lane and element of A: its index in the row-major m × k tile. */
  readonly a: Int32Array;
  /** Per lane and element of B: its index in the column-major k × n tile. */
  readonly b: Int32Array;
  /** Per lane and register of C (and D): its row and column. */
  readonly cRow: Int32Array;
  readonly cCol: Int32Array;
}

const MMA_LAYOUTS = new Map<MmaShape, MmaLayout>();

function mmaLayout(shape: MmaShape): MmaLayout {
  let layout = MMA_LAYOUTS.get(shape);
  if (layout) return layout;
  const info = MMA_SHAPES[shape];
  const { k } = info;
  const a = new Int32Array(32 * info.a.length);
  const b = new Int32Array(32 * info.b.length);
  const cRow = new Int32Array(32 * info.c.length);
  const cCol = new Int32Array(32 * info.c.length);
  for (let lane = 0; lane < 32; lane++) {
    for (let e = 0; e < info.a.length; e++) {
      const { row, col } = fragmentElement(shape, 'a', lane, e);
      a[lane * info.a.length + e] = row * k + col;
    }
    for (let e = 0; e < info.b.length; e++) {
      const { row, col } = fragmentElement(shape, 'b', lane, e);
      b[lane * info.b.length + e] = col * k + row;
    }
    for (let e = 0; e < info.c.length; e++) {
      const { row, col } = fragmentElement(shape, 'c', lane, e);
      cRow[lane * info.c.length + e] = row;
      cCol[lane * info.c.length + e] = col;
    }
  }
  layout = { a, b, cRow, cCol };
  MMA_LAYOUTS.set(shape, layout);
  return layout;
}

/**
 * D = A·B + C for one warp. `a`, `b` and `c` hold each lane's registers in
 * order (lane-major: lane l's register i at l · count + i); returns D's f32
 * bits in the same arrangement as `c`.
 */
export function mmaSyncWarp(
  shape: MmaShape,
  type: MmaInputType,
  a: Uint32Array,
  b: Uint32Array,
  c: Uint32Array,
): Uint32Array {
  const info = MMA_SHAPES[shape];
  const { m, n, k, elementsPerRegister: per } = info;
  const layout = mmaLayout(shape);
  // A row-major (m × k) and B column-major (n × k), so that each dot product reads both in order.
  const A = new Float64Array(m * k);
  const Bt = new Float64Array(k * n);
  // Every element of A and B is some lane's: the fragments tile them exactly.
  for (let i = 0; i < layout.a.length; i++) {
    const e = i % info.a.length;
    A[layout.a[i]!] = inputValue(type, a[(i - e) / per + Math.floor(e / per)]!, e % per);
  }
  for (let i = 0; i < layout.b.length; i++) {
    const e = i % info.b.length;
    Bt[layout.b[i]!] = inputValue(type, b[(i - e) / per + Math.floor(e / per)]!, e % per);
  }
  // Each lane's D element: C's, then the k products in order, summed in a double.
  const d = new Uint32Array(c.length);
  for (let i = 0; i < c.length; i++) {
    const row = layout.cRow[i]! * k;
    const col = layout.cCol[i]! * k;
    let sum = bitsToF32(c[i]!);
    for (let j = 0; j < k; j++) sum += A[row + j]! * Bt[col + j]!;
    d[i] = f32ToBits(sum);
  }
  return d;
}

/**
 * `ldmatrix.m8n8.xN{.trans}.b16` for one warp: `rows(i, r)` gives the 8
 * halves of row r of matrix i (from the address lane 8i + r posted);
 * returns each lane's N registers, lane-major.
 */
export function ldmatrixWarp(
  count: number,
  trans: boolean,
  rows: (matrix: number, row: number) => Uint16Array,
): Uint32Array {
  const out = new Uint32Array(32 * count);
  for (let i = 0; i < count; i++) {
    const tile = Array.from({ length: 8 }, (_, r) => rows(i, r));
    for (let lane = 0; lane < 32; lane++) {
      const outer = lane >>> 2;
      const inner = 2 * (lane & 3);
      const lo = trans ? tile[inner]![outer]! : tile[outer]![inner]!;
      const hi = trans ? tile[inner + 1]![outer]! : tile[outer]![inner + 1]!;
      out[lane * count + i] = (lo | (hi << 16)) >>> 0;
    }
  }
  return out;
}

/**
 * One thread's `cp.async` copies: started copies land in shared memory only
 * when a `wait_group` or `wait_all` retires their group, so a kernel that
 * reads its tile before waiting reads stale data here as it may on hardware.
 */
export class AsyncCopyQueue {
  /** Committed groups, oldest first; each a list of pending writes. */
  readonly #groups: (() => void)[][] = [];
  #open: (() => void)[] = [];

  /** A copy whose source was read at issue; `land` writes it to shared memory. */
  start(land: () => void): void {
    this.#open.push(land);
  }

  commit(): void {
    this.#groups.push(this.#open);
    this.#open = [];
  }

  /** Lands every committed group but the `pending` most recent. */
  waitGroup(pending: number): void {
    while (this.#groups.length > pending) for (const land of this.#groups.shift()!) land();
  }

  waitAll(): void {
    this.commit();
    this.waitGroup(0);
  }

  /** Forgets everything (a new block starts). */
  reset(): void {
    this.#groups.length = 0;
    this.#open = [];
  }
}

interface MbarrierState {
  /** Arrivals each phase expects. */
  readonly expected: number;
  /** Arrivals still missing in the current phase. */
  pending: number;
  /** Bytes announced by expect_tx and not yet landed (negative when they land first). */
  tx: number;
  /** The current phase's parity. */
  phase: number;
}

/**
 * A block's mbarrier objects by shared-memory offset. A phase completes when
 * its arrivals are all in and its transaction count is back at 0; then the
 * parity flips and the arrivals are expected anew. `epoch` counts every
 * change, so that the scheduler can tell threads polling in vain from
 * threads waiting for others to run.
 */
export class Mbarriers {
  readonly #barriers = new Map<number, MbarrierState>();
  epoch = 0;

  init(at: number, count: number, fail: (message: string) => never): void {
    if (count < 1 || count >= 2 ** 20) fail(`mbarrier count ${count} outside 1 .. 2^20 - 1`);
    this.#barriers.set(at, { expected: count, pending: count, tx: 0, phase: 0 });
    this.epoch++;
  }

  /** One arrival announcing `tx` more bytes; returns the parity of the phase it arrived in. */
  arrive(at: number, tx: number, fail: (message: string) => never): number {
    const b = this.#get(at, fail);
    const phase = b.phase;
    if (b.pending === 0) fail('more arrivals than the mbarrier expects');
    b.tx += tx;
    b.pending--;
    this.#advance(b);
    return phase;
  }

  /** `bytes` of a bulk copy landed. */
  completeTx(at: number, bytes: number, fail: (message: string) => never): void {
    const b = this.#get(at, fail);
    b.tx -= bytes;
    this.#advance(b);
  }

  /** Whether the phase of parity `parity` has completed: the current phase is the other one. */
  phaseCompleted(at: number, parity: number, fail: (message: string) => never): boolean {
    return this.#get(at, fail).phase !== parity;
  }

  reset(): void {
    this.#barriers.clear();
    this.epoch = 0;
  }

  #get(at: number, fail: (message: string) => never): MbarrierState {
    return this.#barriers.get(at) ?? fail(`no mbarrier initialised at shared address ${at}`);
  }

  #advance(b: MbarrierState): void {
    this.epoch++;
    if (b.pending === 0 && b.tx === 0) {
      b.phase ^= 1;
      b.pending = b.expected;
    }
  }
}
