import { InvalidArgumentError, UnsupportedOnBackendError } from '@rayo/core';
import type { DeviceProperties } from '../driver/driver.js';
import type { KernelEncoder, Operand } from '../kernel.js';
import type { KernelBuilder } from '../ptx/kernel.js';
import { PtxModule } from '../ptx/module.js';
import { addr, type F32, type R32, type R64 } from '../ptx/operands.js';
import { asVector, MAX_ELEMENTS } from './common.js';
import { loadAllParams } from './entryParams.js';
import { streamLoop } from './gemv.js';
import {
  geometryKey,
  groupsPerBlock,
  loadFloats,
  masked,
  type RowGeometry,
  rowGrid,
  storeFloats,
} from './rowGroups.js';
import type { RowTile, Slot } from './rowTile.js';
import { type FloatStorage, STORAGE_BYTES, storageKey, storageOf, storeFromF32 } from './storage.js';

// Column sums of the backward row kernels (rowReduce.ts re-exports them):
// per-block partials, then a second pass that adds them in a fixed order.

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
/**
 * Warps of a block, each striding over the partial rows: a 768-wide row has
 * only 24 blocks of columns, so each takes the most warps a block holds.
 */
const COLUMN_ROWS = 32;
/** Partial rows a thread loads together before adding them, in order. */
const COLUMN_UNROLL = 4;
export const COLUMN_SUMS_KEY = `rows/column_sums/tile${COLUMN_TILE}x${COLUMN_ROWS}`;

/**
 * out[c] = Σ_p partials[p·n + c] over `parts` rows: a block takes 32 columns,
 * its 32 warps stride over the rows (each warp reads 128 contiguous bytes,
 * COLUMN_UNROLL rows in flight), and the 32 partial sums are added in a
 * fixed order.
 */
export function columnSumsModule(type: FloatStorage = 'f32'): PtxModule {
  const m = new PtxModule();
  m.entry(
    'column_sums',
    { partials: 'ptr', out: 'ptr', parts: 'u32', n: 'u32' },
    (k, p) => {
      const { partials, out, parts, n } = loadAllParams(k, p);
      const tx = k.tid('x');
      const ty = k.tid('y');
      const c = k.madLo('u32', k.reg('u32'), k.ctaid(), COLUMN_TILE, tx);
      const inside = k.setp('lt', 'u32', k.reg('pred'), c, n);
      // Threads past the last column loop zero times but still reach the barrier.
      const end = k.selp('u32', k.reg('u32'), parts, 0, inside);
      const sum = k.mov('f32', k.reg('f32'), 0);
      // The loop's counter, and the row each load reads (one ahead of the other within a pass).
      const r = k.mov('u32', k.reg('u32'), ty);
      const row = k.mov('u32', k.reg('u32'), ty);
      // The loads of several rows go out together; their adds keep the rows' order.
      streamLoop(k, r, end, COLUMN_ROWS, COLUMN_UNROLL, {
        load: () => {
          const at = k.elementAddress(partials, k.madLo('u32', k.reg('u32'), row, n, c), 4);
          const value = k.ldGlobal('f32', k.reg('f32'), at, { nc: true });
          k.add('u32', row, row, COLUMN_ROWS);
          return value;
        },
        use: (value) => {
          k.add('f32', sum, sum, value, { rnd: 'rn' });
        },
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
