import { copy, copyRows, type DType, FLOAT, fill, increment, transpose } from '@rayo/core';
import { type AnyCudaKernel, cudaKernel, type KernelEncoder, type Operand } from '../kernel.js';
import { PtxModule } from '../ptx/module.js';
import { addr, type Pred, type R32, type R64 } from '../ptx/operands.js';
import { BLOCK, checkElementCount, gridFor } from './common.js';
import { loadAllParams, loadParams } from './entryParams.js';

// Every dtype of this family is 32 bits wide and moving data never looks at
// the values, so the kernels move u32 words: bit-exact for every dtype (NaN
// payloads included) and one module per kernel.

// ---- fill ----------------------------------------------------------------------

export const FILL_KEY = 'memory/fill_u32';

/** y[i] = word for i < n, with a grid-stride loop. */
export function fillModule(): PtxModule {
  const m = new PtxModule();
  m.entry(
    'fill_u32',
    { y: 'ptr', n: 'u32', word: 'u32' },
    (k, p) => {
      const { y, n, word } = loadAllParams(k, p);
      k.gridStrideLoop(n, (i) => k.stGlobal('u32', k.elementAddress(y, i, 4), word));
    },
    { maxThreadsPerBlock: BLOCK },
  );
  return m;
}

/** The 32-bit pattern of `value` stored as `dtype`. */
export function wordOf(value: number, dtype: DType): number {
  if (dtype === 'f32') return new Uint32Array(new Float32Array([value]).buffer)[0]!;
  // i32 (two's complement) and u32: infer checked that the value is an integer in range.
  return value >>> 0;
}

const fillKernel = cudaKernel(fill, (encoder, { outputs, attrs }) => {
  const y = outputs[0]!;
  if (y.size === 0) return;
  checkElementCount('fill', 'x', y.size);
  encoder.launch({
    key: FILL_KEY,
    module: fillModule,
    entry: 'fill_u32',
    grid: gridFor(encoder.device, y.size),
    block: BLOCK,
    args: { y, n: y.size, word: wordOf(attrs.value, y.dtype) },
  });
});

// ---- increment -----------------------------------------------------------------

/** The most counters one increment launch takes; more go in further launches. */
export const INCREMENT_MAX_COUNTERS = 4;

export function incrementKey(count: number): string {
  return `memory/increment_s32/${count}`;
}

/** counters_j[i] += by for each of `count` i32 tensors, a grid-stride loop each. */
export function incrementModule(count: number): PtxModule {
  const names = Array.from({ length: count }, (_, j) => j);
  const params: Record<string, 'ptr' | 'u32'> = { by: 'u32' };
  for (const j of names) Object.assign(params, { [`c${j}`]: 'ptr', [`n${j}`]: 'u32' });
  const m = new PtxModule();
  m.entry(
    'increment_s32',
    params,
    (k, p) => {
      const { by } = loadParams(k, p, 'by') as { by: R32 };
      for (const j of names) {
        const { [`c${j}`]: c, [`n${j}`]: n } = loadParams(k, p, `c${j}`, `n${j}`) as Record<
          string,
          R64 | R32
        >;
        k.gridStrideLoop(n as R32, (i) => {
          const at = k.elementAddress(c as R64, i, 4);
          const v = k.ldGlobal('u32', k.reg('u32'), at);
          // Two's complement: a u32 add wraps as an i32 add does.
          k.stGlobal('u32', at, k.add('u32', v, v, by));
        });
      }
    },
    { maxThreadsPerBlock: BLOCK },
  );
  return m;
}

const incrementKernel = cudaKernel(increment, (encoder, { outputs, attrs }) => {
  for (let first = 0; first < outputs.length; first += INCREMENT_MAX_COUNTERS) {
    const counters = outputs.slice(first, first + INCREMENT_MAX_COUNTERS);
    const largest = Math.max(...counters.map((c) => c.size));
    if (largest === 0) continue;
    const args: Record<string, bigint | number> = { by: attrs.by >>> 0 };
    for (const [j, c] of counters.entries()) {
      checkElementCount('increment', `counters[${first + j}]`, c.size);
      Object.assign(args, { [`c${j}`]: c.ptr, [`n${j}`]: c.size });
    }
    encoder.launch({
      key: incrementKey(counters.length),
      module: () => incrementModule(counters.length),
      entry: 'increment_s32',
      grid: gridFor(encoder.device, largest),
      block: BLOCK,
      args,
    });
  }
});

// ---- copy ----------------------------------------------------------------------

const copyKernel = cudaKernel(copy, (encoder, { inputs, outputs }) => {
  const x = inputs[0]!;
  const y = outputs[0]!;
  encoder.copy(x.ptr, y.ptr, x.byteLength);
});

// ---- transpose -----------------------------------------------------------------

/** A TILE×TILE tile per block of TILE×ROWS threads; each thread moves TILE/ROWS elements each way. */
export const TILE = 32;
export const ROWS = 8;
/** Padding each tile row by one word puts a column's words in different shared-memory banks. */
const PITCH = TILE + 1;

export const TRANSPOSE_KEY = `memory/transpose_u32/tile${TILE}x${ROWS}`;

/**
 * y[b, c, r] = x[b, r, c] for a batch of rows×cols matrices, through a
 * shared-memory tile so that both the reads and the writes are coalesced.
 * Blocks loop over tiles; the loop bound is the same for every thread of a
 * block, so every thread reaches both barriers.
 */
export function transposeModule(): PtxModule {
  const m = new PtxModule();
  m.entry(
    'transpose_u32',
    { x: 'ptr', y: 'ptr', rows: 'u32', cols: 'u32', tilesC: 'u32', tilesPerMatrix: 'u32', tiles: 'u32' },
    (k, p) => {
      const { x, y, rows, cols, tilesC, tilesPerMatrix, tiles } = loadAllParams(k, p);
      const tile = k.sharedArray('tile', 'u32', TILE * PITCH);
      const tileBase = k.sharedAddress(tile);
      const tx = k.tid('x');
      const ty = k.tid('y');
      const w = k.reg('u32');
      k.forRange(w, k.ctaid('x'), tiles, k.nctaid('x'), () => {
        const matrix = k.div('u32', k.reg('u32'), w, tilesPerMatrix);
        const t = k.sub('u32', k.reg('u32'), w, k.mulLo('u32', k.reg('u32'), matrix, tilesPerMatrix));
        const tileR = k.div('u32', k.reg('u32'), t, tilesC);
        const tileC = k.sub('u32', k.reg('u32'), t, k.mulLo('u32', k.reg('u32'), tileR, tilesC));
        const r0 = k.mulLo('u32', k.reg('u32'), tileR, TILE);
        const c0 = k.mulLo('u32', k.reg('u32'), tileC, TILE);
        const base = k.mulLo('u32', k.reg('u32'), k.mulLo('u32', k.reg('u32'), matrix, rows), cols);
        const inside = (r: typeof w, c: typeof w) => {
          const inR = k.setp('lt', 'u32', k.reg('pred'), r, rows);
          const inC = k.setp('lt', 'u32', k.reg('pred'), c, cols);
          return k.and('pred', k.reg('pred'), inR, inC);
        };
        /**
         * Moves the tile's elements between the matrix at `global` (`width`
         * wide, rows from `outer0`, columns from `inner0`) and the shared
         * tile, TILE/ROWS rows per thread: thread (tx, ty + j) takes element
         * (outer0 + ty + j, inner0 + tx), so each warp's accesses are a
         * contiguous run of one row.
         */
        const pass = (
          outer0: R32,
          inner0: R32,
          width: R32,
          global: R64,
          slotOf: (ly: R32) => R32,
          isInside: (outer: R32, inner: R32) => Pred,
          move: (at: R64, shared: R32) => void,
        ) => {
          for (let j = 0; j < TILE; j += ROWS) {
            const ly = k.add('u32', k.reg('u32'), ty, j);
            const outer = k.add('u32', k.reg('u32'), outer0, ly);
            const inner = k.add('u32', k.reg('u32'), inner0, tx);
            const index = k.madLo('u32', k.reg('u32'), outer, width, inner);
            k.add('u32', index, index, base);
            const at = k.elementAddress(global, index, 4);
            const slot = slotOf(ly);
            const shared = k.madLo('u32', k.reg('u32'), slot, 4, tileBase);
            const ok = isInside(outer, inner);
            k.predicated(ok, () => move(at, shared));
          }
        };
        // Coalesced reads along the input's rows into tile[ty + j][tx].
        pass(
          r0,
          c0,
          cols,
          x,
          (ly) => k.madLo('u32', k.reg('u32'), ly, PITCH, tx),
          inside,
          (from, to) => k.stShared('u32', addr(to), k.ldGlobal('u32', k.reg('u32'), from, { nc: true })),
        );
        k.barSync();
        // Coalesced writes along the output's rows (the input's columns) from tile[tx][ty + j].
        pass(
          c0,
          r0,
          rows,
          y,
          (ly) => k.madLo('u32', k.reg('u32'), tx, PITCH, ly),
          (c, r) => inside(r, c),
          (to, from) => k.stGlobal('u32', to, k.ldShared('u32', k.reg('u32'), addr(from))),
        );
        // The next tile overwrites the shared one only after everyone read it.
        k.barSync();
      });
    },
    { requiredThreadsPerBlock: [TILE, ROWS, 1] },
  );
  return m;
}

/** Launch values of a transpose of `x.shape` (the last two axes swapped; the rest a batch). */
export function transposePlan(shape: readonly number[]): {
  rows: number;
  cols: number;
  tilesC: number;
  tilesPerMatrix: number;
  tiles: number;
} {
  const rank = shape.length;
  const rows = shape[rank - 2]!;
  const cols = shape[rank - 1]!;
  const batch = shape.slice(0, rank - 2).reduce((a, b) => a * b, 1);
  const tilesC = Math.ceil(cols / TILE);
  const tilesPerMatrix = Math.ceil(rows / TILE) * tilesC;
  return { rows, cols, tilesC, tilesPerMatrix, tiles: batch * tilesPerMatrix };
}

/** Launches the transpose of the 32-bit elements at `x` (the last two axes of `shape` swapped) into `y`. */
export function encodeTranspose32(
  encoder: KernelEncoder,
  x: bigint,
  y: bigint,
  shape: readonly number[],
): void {
  const plan = transposePlan(shape);
  const size = shape.reduce((a, b) => a * b, 1);
  if (size === 0) return;
  // With a single row or column both layouts are the same words in the same order.
  if (plan.rows === 1 || plan.cols === 1) {
    encoder.copy(x, y, size * 4);
    return;
  }
  const device = encoder.device;
  const resident =
    device.multiprocessors * Math.max(1, Math.floor(device.maxThreadsPerMultiprocessor / (TILE * ROWS)));
  encoder.launch({
    key: TRANSPOSE_KEY,
    module: transposeModule,
    entry: 'transpose_u32',
    grid: Math.max(1, Math.min(plan.tiles, resident)),
    block: [TILE, ROWS],
    args: { x, y, ...plan },
  });
}

const transposeKernel = cudaKernel(transpose, (encoder, { inputs, outputs }) => {
  const x = inputs[0]!;
  const y = outputs[0]!;
  if (x.size === 0) return;
  checkElementCount('transpose', 'x', x.size);
  encodeTranspose32(encoder, x.ptr, y.ptr, x.shape);
});

/** x's rows into y from row `row` on: one device-to-device copy of x's bytes (any alignment). */
const copyRowsKernel = cudaKernel(
  copyRows,
  (encoder, { inputs, attrs }) => {
    const [y, x] = inputs as [Operand, Operand];
    if (x.size === 0) return;
    const rowBytes = y.byteLength / y.shape[0]!;
    encoder.copy(x.ptr, y.ptr + BigInt(attrs.row * rowBytes), x.byteLength);
  },
  { dtypes: FLOAT },
);

export const MEMORY_KERNELS: readonly AnyCudaKernel[] = [
  fillKernel,
  incrementKernel,
  copyKernel,
  transposeKernel,
  copyRowsKernel,
];
