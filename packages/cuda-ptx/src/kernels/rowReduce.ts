import { InvalidArgumentError, pow2AtLeast, UnsupportedOnBackendError } from '@rayo/core';
import type { DeviceProperties } from '../driver/driver.js';
import type { KernelEncoder, Operand } from '../kernel.js';
import type { VecOf } from '../ptx/instructionTypes.js';
import type { KernelBuilder } from '../ptx/kernel.js';
import { PtxModule } from '../ptx/module.js';
import { type Address, addr, type F32, type Pred, type R32, type R64 } from '../ptx/operands.js';
import { MAX_ELEMENTS } from './common.js';

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
      kernel: 'rowReduce',
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

function asVector(regs: readonly F32[]): VecOf<F32> {
  return regs.length === 1 ? regs[0]! : (regs as unknown as VecOf<F32>);
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

/** An input of a row kernel. */
export interface RowSource {
  readonly ptr: R64;
  /** `row`: a [rows, n] tensor read at the row; `column`: an [n] vector read at the column. */
  readonly kind: 'row' | 'column';
  /**
   * Kept in registers for the whole row where the geometry caches rows (read
   * once); otherwise read wherever it is used.
   */
  readonly reuse?: boolean;
}

/** One access of a thread's part of a row: `width` consecutive elements. */
export interface Slot {
  /** Which of the thread's slots (0 ..< slots); -1 when streamed. */
  readonly position: number;
  /** Whether the elements exist (undefined: always). */
  readonly valid: Pred | undefined;
  /** Column of the first element. */
  readonly col: R32;
  /** The `width` values of a source or derived quantity at this slot. */
  get(name: string): readonly F32[];
  /** Where this slot's elements are in a [rows, n] tensor at `ptr`. */
  at(ptr: R64): Address;
}

/**
 * A thread's part of the current row: slot j covers columns
 * `(j·threads + laneInGroup)·width` onwards, so a group's accesses are
 * adjacent. With cached geometries reused sources and derived values live in
 * registers for the row, and every slot is an immediate offset from one
 * address per tensor and row; streamed geometries read them again at every
 * pass.
 */
export class RowTile {
  readonly width: number;
  readonly #k: KernelBuilder;
  readonly #place: GroupPlace;
  readonly #n: R32;
  readonly #sources: Readonly<Record<string, RowSource>>;
  /** Column of the thread's first element. */
  readonly #laneCol: R32;
  readonly #cols: R32[] = [];
  readonly #colValid: Pred[] = [];
  readonly #columnBases = new Map<R64, R64>();
  #rowStart: R32 | undefined;
  #rowValid: Pred | undefined;
  /** Per tensor, the address of the thread's first element of the current row. */
  #rowBases = new Map<R64, R64>();
  #slots: { valid: Pred; values: Map<string, F32[]> }[] = [];
  readonly #derived = new Map<string, (slot: Slot) => readonly F32[]>();

  constructor(k: KernelBuilder, place: GroupPlace, n: R32, sources: Readonly<Record<string, RowSource>>) {
    this.#k = k;
    this.#place = place;
    this.#n = n;
    this.#sources = sources;
    const g = place.geometry;
    this.width = g.width;
    this.#laneCol = k.mulLo('u32', k.reg('u32'), place.laneInGroup, g.width);
    // Columns do not depend on the row: their bounds and the column vectors' addresses are set once.
    for (let j = 0; j < g.slots; j++) {
      const col = j === 0 ? this.#laneCol : k.add('u32', k.reg('u32'), this.#laneCol, this.#stride * j);
      this.#cols.push(col);
      this.#colValid.push(k.setp('lt', 'u32', k.reg('pred'), col, n));
    }
    if (this.cached) {
      for (const source of Object.values(sources)) {
        if (source.kind === 'column') {
          this.#columnBases.set(source.ptr, k.elementAddress(source.ptr, this.#laneCol, 4));
        }
      }
    }
  }

  get cached(): boolean {
    return this.#place.geometry.slots > 0;
  }

  get place(): GroupPlace {
    return this.#place;
  }

  get n(): R32 {
    return this.#n;
  }

  /** Elements between one slot of a thread and its next. */
  get #stride(): number {
    return this.#place.geometry.threads * this.width;
  }

  /** Starts a row (inside `forEachRow`): loads the reused sources of a cached geometry. */
  begin(row: R32, valid: Pred | undefined): void {
    const k = this.#k;
    this.#rowStart = k.mulLo('u32', k.reg('u32'), row, this.#n);
    this.#rowValid = valid;
    this.#rowBases = new Map();
    this.#derived.clear();
    this.#slots = this.#colValid.map((colValid) => ({
      valid: valid ? k.and('pred', k.reg('pred'), colValid, valid) : colValid,
      values: new Map<string, F32[]>(),
    }));
    for (const [name, source] of Object.entries(this.#sources)) {
      if (!source.reuse || !this.cached) continue;
      this.each((slot) => {
        this.#slots[slot.position]!.values.set(name, [...slot.get(name)]);
      });
    }
  }

  /**
   * A value per element computed from others: computed now and kept in
   * registers where rows are cached, recomputed wherever it is used otherwise.
   */
  derive(name: string, compute: (slot: Slot) => readonly F32[]): void {
    if (this.cached) {
      this.each((slot) => {
        this.#slots[slot.position]!.values.set(name, [...compute(slot)]);
      });
    } else this.#derived.set(name, compute);
  }

  /** Visits the thread's slots of the current row. */
  each(body: (slot: Slot) => void): void {
    const k = this.#k;
    const rowStart = this.#rowStart;
    if (rowStart === undefined) throw new Error('RowTile.each before begin');
    if (this.cached) {
      this.#slots.forEach((s, position) => {
        const offset = position * this.#stride * 4;
        const at = (ptr: R64) => addr(this.#rowBase(ptr), offset);
        body(this.#slot(position, s.valid, this.#cols[position]!, at, s.values));
      });
      return;
    }
    const col = k.reg('u32');
    k.forRange(col, this.#laneCol, this.#n, this.#stride, () => {
      const index = k.add('u32', k.reg('u32'), rowStart, col);
      const addresses = new Map<R64, R64>();
      const at = (ptr: R64) => {
        if (!addresses.has(ptr)) addresses.set(ptr, k.elementAddress(ptr, index, 4));
        return addr(addresses.get(ptr)!);
      };
      body(this.#slot(-1, this.#rowValid, col, at, new Map()));
    });
  }

  /**
   * Per-thread reduction of `values(slot, j)` (one value per op for element
   * j of the slot) over the thread's elements, then across the group.
   */
  reduce(
    reducer: GroupReducer,
    ops: readonly ReduceOp[],
    values: (slot: Slot, element: number) => readonly F32[],
  ): F32[] {
    const k = this.#k;
    const acc = ops.map((op) => k.mov('f32', k.reg('f32'), identityOf(op)));
    this.each((slot) => {
      for (let j = 0; j < this.width; j++) {
        const v = values(slot, j);
        for (const [i, op] of ops.entries()) combine(k, op, acc[i]!, masked(k, op, v[i]!, slot.valid));
      }
    });
    return reducer.reduce(ops, acc);
  }

  /** Stores `values(slot)` into a [rows, n] tensor at every existing slot. */
  store(ptr: R64, values: (slot: Slot) => readonly F32[]): void {
    this.each((slot) => this.write(slot, ptr, values(slot)));
  }

  /** Stores a slot's values into a [rows, n] tensor where the slot exists. */
  write(slot: Slot, ptr: R64, values: readonly F32[]): void {
    const k = this.#k;
    const at = slot.at(ptr);
    if (slot.valid) k.predicated(slot.valid, () => k.stGlobal('f32', at, asVector(values)));
    else k.stGlobal('f32', at, asVector(values));
  }

  /** The address of the thread's first element of the current row of a [rows, n] tensor. */
  #rowBase(ptr: R64): R64 {
    let base = this.#rowBases.get(ptr);
    if (!base) {
      const k = this.#k;
      base = k.elementAddress(ptr, k.add('u32', k.reg('u32'), this.#rowStart!, this.#laneCol), 4);
      this.#rowBases.set(ptr, base);
    }
    return base;
  }

  #slot(
    position: number,
    valid: Pred | undefined,
    col: R32,
    at: (ptr: R64) => Address,
    values: Map<string, F32[]>,
  ): Slot {
    // Within one visit a value is loaded or derived once.
    const local = new Map(values);
    const slot: Slot = {
      position,
      valid,
      col,
      at,
      get: (name) => {
        const known = local.get(name);
        if (known) return known;
        const source = this.#sources[name];
        const derive = this.#derived.get(name);
        let v: F32[];
        if (source) v = this.#load(source, slot);
        else if (derive) v = [...derive(slot)];
        else throw new Error(`RowTile: no source or derived value '${name}'`);
        local.set(name, v);
        return v;
      },
    };
    return slot;
  }

  #load(source: RowSource, slot: Slot): F32[] {
    const k = this.#k;
    let at: Address;
    if (source.kind === 'row') at = slot.at(source.ptr);
    else if (this.cached) at = addr(this.#columnBases.get(source.ptr)!, slot.position * this.#stride * 4);
    else at = addr(k.elementAddress(source.ptr, slot.col, 4));
    const regs = k.regs('f32', this.width) as F32[];
    const load = () => k.ldGlobal('f32', asVector(regs), at, { nc: true });
    if (slot.valid) k.predicated(slot.valid, load);
    else load();
    return regs;
  }
}

// ---- sums over rows, per column ----------------------------------------------------

/**
 * Per-column sums over the rows a block processes (parameter gradients), in
 * `count` quantities. Cached geometries add in registers and write each
 * block's sums once at the end (`flush`); streamed ones add into the block's
 * row of the partials (zeroed by `columnPartials`). Either way each block
 * owns row `ctaid` of the partials `[count][grid][n]`, which `sumColumns`
 * then adds up in a fixed order: deterministic, no atomics.
 */
export class ColumnSums {
  readonly #k: KernelBuilder;
  readonly #tile: RowTile;
  readonly #partials: R64;
  readonly #count: number;
  readonly #acc: F32[][][] = [];

  constructor(k: KernelBuilder, tile: RowTile, partials: R64, count: number) {
    const g = tile.place.geometry;
    if (!tile.cached && groupsPerBlock(g) !== 1) {
      throw new InvalidArgumentError('streamed column sums need one row group per block', {
        kernel: 'ColumnSums',
        argument: 'geometry',
        expected: 'threads equal to the block',
        actual: geometryKey(g),
      });
    }
    this.#k = k;
    this.#tile = tile;
    this.#partials = partials;
    this.#count = count;
    if (tile.cached) {
      for (let i = 0; i < count; i++) {
        this.#acc.push(
          Array.from({ length: g.slots }, () =>
            Array.from({ length: g.width }, () => k.mov('f32', k.reg('f32'), 0)),
          ),
        );
      }
    }
  }

  /** Adds `values[i]` (a slot's `width` values) to quantity i, where the slot exists. */
  add(slot: Slot, values: readonly (readonly F32[])[]): void {
    const k = this.#k;
    if (this.#tile.cached) {
      values.forEach((v, i) => {
        v.forEach((x, j) => {
          const acc = this.#acc[i]![slot.position]![j]!;
          k.add('f32', acc, acc, masked(k, 'sum', x, slot.valid), { rnd: 'rn' });
        });
      });
      return;
    }
    values.forEach((v, i) => {
      const at = k.elementAddress(this.#partials, this.#partialIndex(i, slot.col), 4);
      const update = () => {
        const old = loadFloats(k, at, v.length);
        for (const [j, o] of old.entries()) k.add('f32', o, o, v[j]!, { rnd: 'rn' });
        storeFloats(k, at, old);
      };
      if (slot.valid) k.predicated(slot.valid, update);
      else update();
    });
  }

  /** After the row loop (every thread of the block must reach it): writes the block's sums. */
  flush(): void {
    if (!this.#tile.cached) return;
    const k = this.#k;
    const place = this.#tile.place;
    const g = place.geometry;
    const cols = Array.from({ length: g.slots }, (_, j) =>
      k.madLo('u32', k.reg('u32'), place.laneInGroup, g.width, j * g.threads * g.width),
    );
    const colValid = cols.map((c) => k.setp('lt', 'u32', k.reg('pred'), c, this.#tile.n));
    if (groupsPerBlock(g) === 1) {
      for (let i = 0; i < this.#count; i++) {
        cols.forEach((col, j) => {
          const at = k.elementAddress(this.#partials, this.#partialIndex(i, col), 4);
          k.predicated(colValid[j]!, () => storeFloats(k, at, this.#acc[i]![j]!));
        });
      }
      return;
    }
    // Groups of one warp hold the same columns: add them with a butterfly over the group index.
    const other = k.reg('f32');
    for (let offset = g.threads; offset < 32; offset *= 2) {
      for (const a of this.#acc.flat(2)) {
        k.shflSync('bfly', other, a, offset);
        k.add('f32', a, a, other, { rnd: 'rn' });
      }
    }
    // Then the warps, through shared memory, in warp order.
    const warps = g.block / 32;
    const capacity = g.slots * g.threads * g.width;
    const buffer = k.sharedArray('column_sums', 'f32', warps * capacity, 16);
    const base = k.sharedAddress(buffer);
    const warpBase = k.madLo('u32', k.reg('u32'), place.warp, capacity * 4, base);
    const writer = k.setp('lt', 'u32', k.reg('pred'), place.lane, g.threads);
    const c = k.reg('u32');
    for (let i = 0; i < this.#count; i++) {
      cols.forEach((col, j) => {
        const at = k.madLo('u32', k.reg('u32'), col, 4, warpBase);
        k.predicated(writer, () => k.stShared('f32', addr(at), asVector(this.#acc[i]![j]!)));
      });
      k.barSync();
      k.forRange(c, place.tid, this.#tile.n, g.block, () => {
        const word = k.madLo('u32', k.reg('u32'), c, 4, base);
        const sum = k.ldShared('f32', k.reg('f32'), addr(word));
        for (let w = 1; w < warps; w++) {
          const v = k.ldShared('f32', k.reg('f32'), addr(word, w * capacity * 4));
          k.add('f32', sum, sum, v, { rnd: 'rn' });
        }
        k.stGlobal('f32', k.elementAddress(this.#partials, this.#partialIndex(i, c), 4), sum);
      });
      k.barSync();
    }
  }

  /** Index of column `col` of quantity i in this block's partial row: (i·grid + ctaid)·n + col. */
  #partialIndex(i: number, col: R32): R32 {
    const k = this.#k;
    const blockRow = i === 0 ? k.ctaid() : k.madLo('u32', k.reg('u32'), k.nctaid(), i, k.ctaid());
    return k.madLo('u32', k.reg('u32'), blockRow, this.#tile.n, col);
  }
}

/**
 * Scratch for `count` column sums of `grid` blocks over rows of `n`, zeroed
 * where a streamed geometry accumulates into it.
 */
export function columnPartials(
  encoder: KernelEncoder,
  kernel: string,
  g: RowGeometry,
  grid: number,
  n: number,
  count: number,
): bigint {
  const words = count * grid * n;
  if (words > MAX_ELEMENTS) {
    throw new UnsupportedOnBackendError('rows too long for the per-block column sums', {
      kernel,
      argument: 'x',
      expected: `count · blocks · row length <= ${MAX_ELEMENTS}`,
      actual: `${count} · ${grid} · ${n}`,
    });
  }
  const ptr = encoder.scratch(words * 4);
  if (g.slots === 0) encoder.fill32(ptr, 0, words);
  return ptr;
}

/** Blocks for a kernel with column sums: half the resident ones keep the partials small. */
export function columnSumGrid(
  device: DeviceProperties,
  g: RowGeometry,
  rows: number,
  n: number,
  count: number,
) {
  const grid = rowGrid(device, g, rows, 0.5);
  return Math.max(1, Math.min(grid, Math.floor(MAX_ELEMENTS / (count * Math.max(1, n)))));
}

// ---- the second pass: column sums of the partials -----------------------------------

const COLUMN_TILE = 32;
const COLUMN_ROWS = 8;
export const COLUMN_SUMS_KEY = `rows/column_sums/tile${COLUMN_TILE}x${COLUMN_ROWS}`;

/**
 * out[c] = Σ_p partials[p·n + c] over `parts` rows: a block takes 32 columns,
 * its 8 warps stride over the rows (each warp reads 128 contiguous bytes),
 * and the 8 partial sums are added in a fixed order.
 */
export function columnSumsModule(): PtxModule {
  const m = new PtxModule();
  m.entry(
    'column_sums',
    { partials: 'ptr', out: 'ptr', parts: 'u32', n: 'u32' },
    (k, p) => {
      const partials = k.globalPointer(p.partials);
      const out = k.globalPointer(p.out);
      const parts = k.ldParam(p.parts);
      const n = k.ldParam(p.n);
      const tx = k.tid('x');
      const ty = k.tid('y');
      const c = k.madLo('u32', k.reg('u32'), k.ctaid(), COLUMN_TILE, tx);
      const inside = k.setp('lt', 'u32', k.reg('pred'), c, n);
      // Threads past the last column loop zero times but still reach the barrier.
      const end = k.selp('u32', k.reg('u32'), parts, 0, inside);
      const sum = k.mov('f32', k.reg('f32'), 0);
      const r = k.reg('u32');
      k.forRange(r, ty, end, COLUMN_ROWS, () => {
        const at = k.elementAddress(partials, k.madLo('u32', k.reg('u32'), r, n, c), 4);
        k.add('f32', sum, sum, k.ldGlobal('f32', k.reg('f32'), at, { nc: true }), { rnd: 'rn' });
      });
      const tile = k.sharedArray('column_tile', 'f32', COLUMN_TILE * COLUMN_ROWS);
      const base = k.sharedAddress(tile);
      const mine = k.madLo('u32', k.reg('u32'), k.madLo('u32', k.reg('u32'), ty, COLUMN_TILE, tx), 4, base);
      k.stShared('f32', addr(mine), sum);
      k.barSync();
      const first = k.setp('eq', 'u32', k.reg('pred'), ty, 0);
      const write = k.and('pred', k.reg('pred'), first, inside);
      k.ifThen(write, () => {
        for (let row = 1; row < COLUMN_ROWS; row++) {
          const v = k.ldShared('f32', k.reg('f32'), addr(mine, row * COLUMN_TILE * 4));
          k.add('f32', sum, sum, v, { rnd: 'rn' });
        }
        k.stGlobal('f32', k.elementAddress(out, c, 4), sum);
      });
    },
    { requiredThreadsPerBlock: [COLUMN_TILE, COLUMN_ROWS, 1] },
  );
  return m;
}

/** Adds up quantity i of the partials `[outs.length][parts][n]` into `outs[i]`. */
export function sumColumns(
  encoder: KernelEncoder,
  partials: bigint,
  parts: number,
  n: number,
  outs: readonly Operand[],
): void {
  outs.forEach((out, i) => {
    encoder.launch({
      key: COLUMN_SUMS_KEY,
      module: columnSumsModule,
      entry: 'column_sums',
      grid: Math.ceil(n / COLUMN_TILE),
      block: [COLUMN_TILE, COLUMN_ROWS],
      args: { partials: partials + BigInt(i * parts * n * 4), out, parts, n },
    });
  });
}

// ---- a whole row kernel -------------------------------------------------------------

/** What a row kernel's body works with. */
export interface RowKernel {
  readonly k: KernelBuilder;
  readonly place: GroupPlace;
  readonly reducer: GroupReducer;
  /** The thread's part of the current row. */
  readonly tile: RowTile;
  readonly n: R32;
  readonly pointer: (name: string) => R64;
  readonly float: (name: string) => F32;
}

export interface RowKernelDecl {
  readonly entry: string;
  readonly geometry: RowGeometry;
  /** Pointer parameters, in order; those in `sources` are read through the tile. */
  readonly pointers: readonly string[];
  /** f32 parameters after `rows` and `n`. */
  readonly floats?: readonly string[];
  readonly sources: Readonly<Record<string, Omit<RowSource, 'ptr'>>>;
  /** Emits set-up code, and returns the code of one row (after the tile's `begin`) and of the end. */
  readonly build: (r: RowKernel) => { readonly row: () => void; readonly finish?: () => void };
}

/**
 * A module with one entry over `[rows, n]` tensors (parameters: the
 * pointers, `rows`, `n`, the floats): every row group loops over its rows.
 */
export function rowKernelModule(decl: RowKernelDecl): PtxModule {
  const params: Record<string, 'ptr' | 'u32' | 'f32'> = {};
  for (const name of decl.pointers) params[name] = 'ptr';
  params.rows = 'u32';
  params.n = 'u32';
  for (const name of decl.floats ?? []) params[name] = 'f32';
  const m = new PtxModule();
  m.entry(
    decl.entry,
    params,
    (k, p) => {
      const pointers = new Map(decl.pointers.map((name) => [name, k.globalPointer(p[name] as never)]));
      const floats = new Map((decl.floats ?? []).map((name) => [name, k.ldParam(p[name] as never) as F32]));
      const rows = k.ldParam(p.rows as never) as R32;
      const n = k.ldParam(p.n as never) as R32;
      const place = groupPlace(k, decl.geometry);
      const reducer = new GroupReducer(k, place);
      const sources: Record<string, RowSource> = {};
      for (const [name, source] of Object.entries(decl.sources)) {
        sources[name] = { ...source, ptr: pointers.get(name)! };
      }
      const tile = new RowTile(k, place, n, sources);
      const { row, finish } = decl.build({
        k,
        place,
        reducer,
        tile,
        n,
        pointer: (name) => pointers.get(name) ?? unknownParam(decl.entry, name),
        float: (name) => floats.get(name) ?? unknownParam(decl.entry, name),
      });
      forEachRow(
        k,
        place,
        rows,
        (r, valid) => {
          tile.begin(r, valid);
          row();
        },
        reducer,
      );
      finish?.();
    },
    // Without `.minnctapersm` ptxas trades a few spills for occupancy; cached rows are better off in registers.
    { requiredThreadsPerBlock: [decl.geometry.block, 1, 1], minBlocksPerSm: 1 },
  );
  return m;
}

/** An entry name for a spec: `logSoftmax` gives `log_softmax`. */
export function entryNameOf(specName: string): string {
  return specName.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);
}

function unknownParam(entry: string, name: string): never {
  throw new InvalidArgumentError('no such parameter', { kernel: entry, argument: name });
}
