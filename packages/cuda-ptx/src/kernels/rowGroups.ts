import { InvalidArgumentError, pow2AtLeast } from '@rayo/core';
import type { DeviceProperties } from '../driver/driver.js';
import type { Operand } from '../kernel.js';
import type { KernelBuilder } from '../ptx/kernel.js';
import { type Address, addr, type F32, type Pred, type R32, type R64 } from '../ptx/operands.js';
import { asVector } from './common.js';

/**
 * Building blocks of kernels that reduce along rows: a group of threads per
 * row (a part of a warp for short rows, the whole block for long ones), the
 * row's elements spread over the group in coalesced `.v4`/`.v2` slots, and
 * deterministic reductions (shuffle butterflies, then shared memory across
 * warps, never float atomics). Every lane of a group ends with the same
 * bits of the result, so every thread can use it.
 */

export type ReduceOp = 'sum' | 'max';

/** How the threads of a block share rows. */
export interface RowGeometry {
  /** Threads per row: a power of two up to 32 (several rows per warp), or the whole block. */
  readonly threads: number;
  /** Threads per block, a multiple of 32. */
  readonly block: number;
  /** Elements per access: 4 (`.v4`), 2 (`.v2`) or 1; it divides the row length. */
  readonly width: 1 | 2 | 4;
  /**
   * Accesses per thread that hold a whole row in registers, so that a row is
   * read from memory once; 0 streams the row from memory at every pass.
   */
  readonly slots: number;
}

/**
 * Registers per thread a cached row may take: each slot costs its floats
 * (width times the floats held per element) plus about one for its bound.
 * With 36 the planned kernels need 128 registers or fewer (most 50 to 90)
 * and never spill; the ptxas tests check every kind of planned geometry.
 */
export const ROW_REGISTER_BUDGET = 36;
/** Threads per block when several rows share a warp. */
export const WARP_ROWS_BLOCK = 128;
/** Threads per block when a long row is streamed from memory. */
export const STREAM_BLOCK = 512;
/** Block sizes for one row per block; at 1024 threads ptxas leaves too few registers for cached rows. */
const BLOCK_SIZES = [128, 256, 512] as const;
/** Slots per thread that a block size is raised to avoid (fewer, wider blocks beyond). */
const PREFERRED_BLOCK_SLOTS = 4;
const NAN = Number.NaN;

const isPowerOfTwo = (x: number) => Number.isInteger(x) && x > 0 && (x & (x - 1)) === 0;

/** Groups of `threads` threads per block: several rows per block only when a group is within a warp. */
export function groupsPerBlock(g: RowGeometry): number {
  return g.block / g.threads;
}

/** The part of a module key that names the geometry, e.g. `t32b128w4s2` or `t512b512w4stream`. */
export function geometryKey(g: RowGeometry): string {
  return `t${g.threads}b${g.block}w${g.width}${g.slots > 0 ? `s${g.slots}` : 'stream'}`;
}

function checkGeometry(g: RowGeometry): void {
  const ok =
    g.block % 32 === 0 &&
    g.block >= 32 &&
    g.block <= 1024 &&
    ((isPowerOfTwo(g.threads) && g.threads <= 32) || g.threads === g.block) &&
    [1, 2, 4].includes(g.width) &&
    Number.isInteger(g.slots) &&
    g.slots >= 0;
  if (!ok) {
    throw new InvalidArgumentError('invalid row geometry', {
      operation: 'rowReduce',
      argument: 'geometry',
      expected:
        'threads a power of two <= 32 or the block; block a multiple of 32 up to 1024; width 1, 2 or 4',
      actual: JSON.stringify(g),
    });
  }
}

/**
 * The widest access (4, 2 or 1 floats) that divides `n` and to which every
 * pointer is aligned, so that each row starts on an access boundary.
 */
export function accessWidth(n: number, pointers: readonly (Operand | bigint)[]): 1 | 2 | 4 {
  for (const width of [4, 2] as const) {
    const bytes = BigInt(4 * width);
    const aligned = pointers.every((p) => (typeof p === 'bigint' ? p : p.ptr) % bytes === 0n);
    if (n % width === 0 && aligned) return width;
  }
  return 1;
}

/**
 * The geometry for rows of `n` elements (a multiple of `width`) when a thread
 * keeps `floatsPerElement` floats per element of its part of the row in
 * registers (the reused inputs, derived values and column sums): short rows
 * share a warp, longer ones take a block, rows too long for registers stream.
 */
export function planRows(n: number, width: 1 | 2 | 4, floatsPerElement: number): RowGeometry {
  const accesses = Math.ceil(n / width);
  const maxSlots = Math.max(1, Math.floor(ROW_REGISTER_BUDGET / (Math.max(1, floatsPerElement) * width + 1)));
  if (accesses <= 32 * maxSlots) {
    const threads = Math.min(32, pow2AtLeast(accesses));
    return { threads, block: WARP_ROWS_BLOCK, width, slots: Math.ceil(accesses / threads) };
  }
  for (const block of BLOCK_SIZES) {
    const slots = Math.ceil(accesses / block);
    if (slots <= Math.min(PREFERRED_BLOCK_SLOTS, maxSlots)) return { threads: block, block, width, slots };
  }
  const largest = BLOCK_SIZES[BLOCK_SIZES.length - 1]!;
  const slots = Math.ceil(accesses / largest);
  if (slots <= maxSlots) return { threads: largest, block: largest, width, slots };
  return { threads: STREAM_BLOCK, block: STREAM_BLOCK, width, slots: 0 };
}

/**
 * The geometries `planRows` gives for some row length with these needs,
 * each at its most slots: the ones to check for register spills.
 */
export function largestPlannedGeometries(floatsPerElement: number): RowGeometry[] {
  const found = new Map<string, RowGeometry>();
  for (const width of [1, 2, 4] as const) {
    let previous = planRows(width, width, floatsPerElement);
    for (let accesses = 2; previous.slots > 0; accesses++) {
      const g = planRows(accesses * width, width, floatsPerElement);
      const changed = g.threads !== previous.threads || g.block !== previous.block || g.slots === 0;
      if (changed) found.set(geometryKey(previous), previous);
      previous = g;
    }
    found.set(geometryKey(previous), previous);
  }
  return [...found.values()];
}

/**
 * Blocks for `rows` rows: enough for every row, at most `fill` times as many
 * as the device keeps resident (kernels loop over further rows).
 */
export function rowGrid(device: DeviceProperties, g: RowGeometry, rows: number, fill = 1): number {
  const perSm = Math.max(1, Math.floor(device.maxThreadsPerMultiprocessor / g.block));
  const resident = Math.max(1, Math.floor(device.multiprocessors * perSm * fill));
  return Math.max(1, Math.min(Math.ceil(rows / groupsPerBlock(g)), resident));
}

/** A launch's grid and block for `rows` rows: `rowGrid`'s blocks, each of the geometry's threads. */
export function rowLaunchDims(
  device: DeviceProperties,
  g: RowGeometry,
  rows: number,
): { grid: number; block: number } {
  return { grid: rowGrid(device, g, rows), block: g.block };
}

// ---- arithmetic -----------------------------------------------------------------

/** The value a reduction starts from. */
export function identityOf(op: ReduceOp): number {
  return op === 'sum' ? 0 : Number.NEGATIVE_INFINITY;
}

/**
 * `acc = acc op value`. The max keeps a NaN from either side (as Math.max
 * does; PTX's max.f32 would return the other operand, and max.NaN needs sm_80).
 */
export function combine(k: KernelBuilder, op: ReduceOp, acc: F32, value: F32): F32 {
  if (op === 'sum') return k.add('f32', acc, acc, value, { rnd: 'rn' });
  const larger = k.max('f32', k.reg('f32'), acc, value);
  const unordered = k.setp('nan', 'f32', k.reg('pred'), acc, value);
  return k.selp('f32', acc, NAN, larger, unordered);
}

/** `value` where `valid` holds (or always when undefined), else the op's identity. */
export function masked(k: KernelBuilder, op: ReduceOp, value: F32, valid: Pred | undefined): F32 {
  if (!valid) return value;
  return k.selp('f32', k.reg('f32'), value, identityOf(op), valid);
}

/** The u32 `n` as an f32 (rounded to nearest beyond 2^24), for means. */
export function countAsF32(k: KernelBuilder, n: R32): F32 {
  return k.cvt('f32', 'u32', k.reg('f32'), n, { rnd: 'rn' });
}

/** `width` registers loaded from `address` with one `.v2`/`.v4` access where width > 1. */
export function loadFloats(
  k: KernelBuilder,
  address: R64 | Address,
  width: number,
  opts: { readonly nc?: boolean } = {},
): F32[] {
  const regs = k.regs('f32', width) as F32[];
  k.ldGlobal('f32', asVector(regs), address, { nc: opts.nc ?? false });
  return regs;
}

/** Stores `values` at `address` with one access. */
export function storeFloats(k: KernelBuilder, address: R64 | Address, values: readonly F32[]): void {
  k.stGlobal('f32', address, asVector(values));
}

// ---- where a thread is ------------------------------------------------------------

/** A thread's place in its block and its row group. */
export interface GroupPlace {
  readonly geometry: RowGeometry;
  readonly tid: R32;
  /** Lane in the warp (`tid & 31`; the interpreter has no %laneid). */
  readonly lane: R32;
  readonly warp: R32;
  /** Index in the row group: which slots of the row are this thread's. */
  readonly laneInGroup: R32;
  /** Which of the block's row groups. */
  readonly group: R32 | number;
}

export function groupPlace(k: KernelBuilder, g: RowGeometry): GroupPlace {
  checkGeometry(g);
  const tid = k.tid();
  const lane = k.and('b32', k.reg('u32'), tid, 31);
  const warp = k.shr('u32', k.reg('u32'), tid, 5);
  if (groupsPerBlock(g) === 1) return { geometry: g, tid, lane, warp, laneInGroup: tid, group: 0 };
  const laneInGroup = k.and('b32', k.reg('u32'), tid, g.threads - 1);
  const group = k.shr('u32', k.reg('u32'), tid, Math.log2(g.threads));
  return { geometry: g, tid, lane, warp, laneInGroup, group };
}

// ---- reductions across a group --------------------------------------------------------

/**
 * Reduces values across the threads of a row group. Within a warp through a
 * shuffle butterfly (every lane ends with the same bits); a whole-block group
 * then goes through shared memory: each warp's lane 0 writes its result, one
 * barrier, and every thread combines the warps' results in warp order.
 * Each call site has its own shared buffer; `forEachRow` adds a barrier
 * where a loop body has only one site, so that no buffer is rewritten while
 * a slower warp still reads it.
 */
export class GroupReducer {
  #sites = 0;

  constructor(
    private readonly k: KernelBuilder,
    private readonly place: GroupPlace,
  ) {}

  /** Call sites that went through shared memory so far. */
  get sharedSites(): number {
    return this.#sites;
  }

  reduce(ops: readonly ReduceOp[], values: readonly F32[]): F32[] {
    const k = this.k;
    const g = this.place.geometry;
    const acc = values.map((v) => k.mov('f32', k.reg('f32'), v));
    const other = k.reg('f32');
    for (let offset = Math.min(g.threads, 32) / 2; offset >= 1; offset /= 2) {
      acc.forEach((a, i) => {
        k.shflSync('bfly', other, a, offset);
        combine(k, ops[i]!, a, other);
      });
    }
    if (g.threads <= 32) return acc;

    const warps = g.block / 32;
    const buffer = k.sharedArray(`group_reduce${this.#sites++}`, 'f32', warps * acc.length, 16);
    const base = k.sharedAddress(buffer);
    const first = k.setp('eq', 'u32', k.reg('pred'), this.place.lane, 0);
    const slot = k.madLo('u32', k.reg('u32'), this.place.warp, 4, base);
    k.predicated(first, () => {
      for (const [i, a] of acc.entries()) k.stShared('f32', addr(slot, i * warps * 4), a);
    });
    k.barSync();
    // Every thread reads the same words (a broadcast), up to four warps' per access.
    const perAccess = warps % 4 === 0 ? 4 : warps % 2 === 0 ? 2 : 1;
    return acc.map((_, i) => {
      const result = k.reg('f32');
      for (let w = 0; w < warps; w += perAccess) {
        const words = k.regs('f32', perAccess) as F32[];
        k.ldShared('f32', asVector(words), addr(base, (i * warps + w) * 4));
        words.forEach((word, j) => {
          if (w + j === 0) k.mov('f32', result, word);
          else combine(k, ops[i]!, result, word);
        });
      }
      return result;
    });
  }
}

/**
 * Runs `body` for every row this thread's group owns: the block takes
 * `groupsPerBlock` consecutive rows at a time (rows of one warp are
 * adjacent, so its accesses coalesce) and strides over the grid. The loop
 * is uniform across the block, so shuffles and barriers in `body` see every
 * thread; `valid` says whether the group's row exists (undefined: always).
 */
export function forEachRow(
  k: KernelBuilder,
  place: GroupPlace,
  rows: R32,
  body: (row: R32, valid: Pred | undefined) => void,
  reducer?: GroupReducer,
): void {
  const perBlock = groupsPerBlock(place.geometry);
  const start = perBlock === 1 ? k.ctaid() : k.mulLo('u32', k.reg('u32'), k.ctaid(), perBlock);
  const step = perBlock === 1 ? k.nctaid() : k.mulLo('u32', k.reg('u32'), k.nctaid(), perBlock);
  const base = k.reg('u32');
  k.forRange(base, start, rows, step, () => {
    const sitesBefore = reducer?.sharedSites ?? 0;
    if (perBlock === 1) body(base, undefined);
    else {
      const row = k.add('u32', k.reg('u32'), base, place.group as R32);
      body(row, k.setp('lt', 'u32', k.reg('pred'), row, rows));
    }
    if ((reducer?.sharedSites ?? 0) - sitesBefore === 1) k.barSync();
  });
}

// ---- a row's elements, per thread --------------------------------------------------------
