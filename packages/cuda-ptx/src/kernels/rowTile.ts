import type { KernelBuilder } from '../ptx/kernel.js';
import { type Address, addr, type F32, type Pred, type R32, type R64 } from '../ptx/operands.js';
import { asVector } from './common.js';
import {
  combine,
  type GroupPlace,
  type GroupReducer,
  identityOf,
  masked,
  type ReduceOp,
} from './rowGroups.js';
import { type FloatStorage, loadAsF32, STORAGE_BYTES, storesOf } from './storage.js';

// A thread's part of a row of a row kernel (rowReduce.ts re-exports it).

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
  /** The storage of the tensors the tile reads and writes, but those `storage` names. */
  readonly type: FloatStorage;
  readonly #storage: ReadonlyMap<R64, FloatStorage>;
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
    storage: ReadonlyMap<R64, FloatStorage> = new Map(),
  ) {
    this.type = type;
    this.#storage = storage;
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
          this.#columnBases.set(
            source.ptr,
            k.elementAddress(source.ptr, this.#laneCol, this.#bytes(source.ptr)),
          );
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
        const at = (ptr: R64) => addr(this.#rowBase(ptr), position * this.#stride * this.#bytes(ptr));
        body(this.#slot(position, s.valid, this.#cols[position]!, at, s.values));
      });
      return;
    }
    const col = k.reg('u32');
    k.forRange(col, this.#laneCol, this.#n, this.#stride, () => {
      const index = k.add('u32', k.reg('u32'), rowStart, col);
      const addresses = new Map<R64, R64>();
      const at = (ptr: R64) => {
        if (!addresses.has(ptr)) addresses.set(ptr, k.elementAddress(ptr, index, this.#bytes(ptr)));
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
    const store = storesOf(k, this.#typeOf(ptr), values);
    if (slot.valid) k.predicated(slot.valid, () => store(at));
    else store(at);
  }

  #typeOf(ptr: R64): FloatStorage {
    return this.#storage.get(ptr) ?? this.type;
  }

  #bytes(ptr: R64): number {
    return STORAGE_BYTES[this.#typeOf(ptr)];
  }

  /** The address of the thread's first element of the current row of a [rows, n] tensor. */
  #rowBase(ptr: R64): R64 {
    let base = this.#rowBases.get(ptr);
    if (!base) {
      const k = this.#k;
      const col = k.add('u32', k.reg('u32'), this.#rowStart!, this.#laneCol);
      base = k.elementAddress(ptr, col, this.#bytes(ptr));
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
      at = addr(this.#columnBases.get(source.ptr)!, slot.position * this.#stride * this.#bytes(source.ptr));
    else at = addr(k.elementAddress(source.ptr, slot.col, this.#bytes(source.ptr)));
    const regs = k.regs('f32', this.width) as F32[];
    const type = this.#typeOf(source.ptr);
    if (type !== 'f32') {
      // Halves are widened after the load; what a missing slot skips reads as zeros.
      loadAsF32(k, type, regs, at, slot.valid ? { ok: slot.valid } : {});
      return regs;
    }
    const load = () => k.ldGlobal('f32', asVector(regs), at, { nc: true });
    if (slot.valid) k.predicated(slot.valid, load);
    else load();
    return regs;
  }
}
