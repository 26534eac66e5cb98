import { InvalidArgumentError, UnsupportedOnBackendError } from '@rayo/core';
import type { DeviceProperties } from '../driver/driver.js';
import type { KernelEncoder, Operand } from '../kernel.js';
import type { KernelBuilder } from '../ptx/kernel.js';
import { PtxModule } from '../ptx/module.js';
import { type Address, addr, type F32, type Pred, type R32, type R64 } from '../ptx/operands.js';
import { asVector, MAX_ELEMENTS } from './common.js';
import {
  combine,
  forEachRow,
  type GroupPlace,
  GroupReducer,
  geometryKey,
  groupPlace,
  groupsPerBlock,
  identityOf,
  loadFloats,
  masked,
  type ReduceOp,
  type RowGeometry,
  rowGrid,
  storeFloats,
} from './rowGroups.js';
import {
  type FloatStorage,
  loadAsF32,
  STORAGE_BYTES,
  storageKey,
  storageOf,
  storeFromF32,
  storesOf,
} from './storage.js';

// Row kernels: a thread's part of a row (RowTile), the column sums of
// backward kernels (ColumnSums), and a whole kernel from a declaration
// (rowKernelModule). The row-group primitives they are built on are
// re-exported, so that every row kernel family imports from here.
export * from './rowGroups.js';

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
  /** The storage of every tensor the tile reads and writes. */
  readonly type: FloatStorage;
  readonly #bytes: number;
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

  constructor(
    k: KernelBuilder,
    place: GroupPlace,
    n: R32,
    sources: Readonly<Record<string, RowSource>>,
    type: FloatStorage = 'f32',
  ) {
    this.type = type;
    this.#bytes = STORAGE_BYTES[type];
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
          this.#columnBases.set(source.ptr, k.elementAddress(source.ptr, this.#laneCol, this.#bytes));
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
        const offset = position * this.#stride * this.#bytes;
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
        if (!addresses.has(ptr)) addresses.set(ptr, k.elementAddress(ptr, index, this.#bytes));
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
    const store = storesOf(k, this.type, values);
    if (slot.valid) k.predicated(slot.valid, () => store(at));
    else store(at);
  }

  /** The address of the thread's first element of the current row of a [rows, n] tensor. */
  #rowBase(ptr: R64): R64 {
    let base = this.#rowBases.get(ptr);
    if (!base) {
      const k = this.#k;
      base = k.elementAddress(ptr, k.add('u32', k.reg('u32'), this.#rowStart!, this.#laneCol), this.#bytes);
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
    else if (this.cached)
      at = addr(this.#columnBases.get(source.ptr)!, slot.position * this.#stride * this.#bytes);
    else at = addr(k.elementAddress(source.ptr, slot.col, this.#bytes));
    const regs = k.regs('f32', this.width) as F32[];
    if (this.type !== 'f32') {
      // Halves are widened after the load; what a missing slot skips reads as zeros.
      loadAsF32(k, this.type, regs, at, slot.valid ? { ok: slot.valid } : {});
      return regs;
    }
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
        operation: 'ColumnSums',
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
      operation: kernel,
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
export function columnSumsModule(type: FloatStorage = 'f32'): PtxModule {
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
        storeFromF32(k, type, k.elementAddress(out, c, STORAGE_BYTES[type]), sum);
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
    const type = storageOf(out);
    encoder.launch({
      key: `${COLUMN_SUMS_KEY}${storageKey([type])}`,
      module: () => columnSumsModule(type),
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
  /** Storage of the tensors read and written through the tile; f32 when absent. */
  readonly type?: FloatStorage;
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
      const tile = new RowTile(k, place, n, sources, decl.type);
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
  throw new InvalidArgumentError('no such parameter', { operation: entry, argument: name });
}
