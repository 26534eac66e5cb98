import { FLOAT, type KernelSpec, layerNorm, layerNormBackward, rmsNorm, rmsNormBackward } from '@rayo/core';
import {
  type AnyCudaKernel,
  cudaKernel,
  type KernelEncoder,
  type LaunchValue,
  type Operand,
} from '../kernel.js';
import type { PtxModule } from '../ptx/module.js';
import type { F32, R64 } from '../ptx/operands.js';
import { checkElementCount } from './common.js';
import {
  accessWidth,
  ColumnSums,
  columnPartials,
  columnSumGrid,
  countAsF32,
  entryNameOf,
  geometryKey,
  planRows,
  type RowGeometry,
  type RowKernel,
  type RowSource,
  rowGrid,
  rowKernelModule,
  type Slot,
  sumColumns,
} from './rowReduce.js';
import { type FloatStorage, fillZero, storageKey, storageOf } from './storage.js';

type EpsAttrs = { eps: number };

/** One normalization kernel: tensors in spec order, what the tile reads, and one row's work. */
export interface NormDecl {
  readonly spec: KernelSpec<EpsAttrs>;
  /** Input parameter names, in spec order. */
  readonly inputs: readonly string[];
  /** The output written per row (y or dx). */
  readonly output: string;
  /** Outputs summed over rows per column (parameter gradients), in spec order after `output`. */
  readonly columnSums: readonly string[];
  readonly sources: Readonly<Record<string, Omit<RowSource, 'ptr'>>>;
  /**
   * Floats per element a thread holds at once: reused inputs, column sums,
   * and the loads ptxas hoists; the ptxas tests check the planned geometries
   * do not spill.
   */
  readonly registers: number;
  /** Emits one row's work; `sums` exists where `columnSums` is not empty. */
  readonly row: (r: NormRow) => void;
}

/** What a row body of this family works with. */
export interface NormRow extends RowKernel {
  /** n as an f32 (for means). */
  readonly count: F32;
  readonly eps: F32;
  readonly out: R64;
  readonly sums: ColumnSums | undefined;
}

const reused = { kind: 'row', reuse: true } as const;
const column = { kind: 'column' } as const;

const f32 = (r: NormRow) => r.k.reg('f32');
const sub = (r: NormRow, a: F32, b: F32) => r.k.sub('f32', f32(r), a, b, { rnd: 'rn' });
const mul = (r: NormRow, a: F32, b: F32) => r.k.mul('f32', f32(r), a, b, { rnd: 'rn' });
const mean = (r: NormRow, total: F32) => r.k.div('f32', f32(r), total, r.count, 'rn');

/** 1 / sqrt(sumSquares / n + eps), with IEEE square root and reciprocal. */
function inverseRms(r: NormRow, sumSquares: F32): F32 {
  const t = r.k.add('f32', f32(r), mean(r, sumSquares), r.eps, { rnd: 'rn' });
  return r.k.rcp(f32(r), r.k.sqrt(f32(r), t, 'rn'), 'rn');
}

/**
 * 1 / sqrt(var + eps) of the row, the variance from a second pass over
 * `centred` = x − mean (no cancellation), which replaces x in registers.
 */
function centreAndScale(r: NormRow): F32 {
  const [total] = r.tile.reduce(r.reducer, ['sum'], (slot, j) => [slot.get('x')[j]!]);
  const mu = mean(r, total!);
  r.tile.derive('centred', (slot) => slot.get('x').map((v) => sub(r, v, mu)));
  const [squares] = r.tile.reduce(r.reducer, ['sum'], (slot, j) => {
    const d = slot.get('centred')[j]!;
    return [mul(r, d, d)];
  });
  return inverseRms(r, squares!);
}

const RMS_NORM_DECL: NormDecl = {
  spec: rmsNorm,
  inputs: ['x', 'weight'],
  output: 'y',
  columnSums: [],
  sources: { x: reused, weight: column },
  registers: 2,
  // y = x · s · weight, s = 1 / sqrt(mean(x²) + eps)
  row: (r) => {
    const [squares] = r.tile.reduce(r.reducer, ['sum'], (slot, j) => {
      const v = slot.get('x')[j]!;
      return [mul(r, v, v)];
    });
    const s = inverseRms(r, squares!);
    r.tile.store(r.out, (slot) => slot.get('x').map((v, j) => mul(r, mul(r, v, s), slot.get('weight')[j]!)));
  },
};

export const NORM_DECLS: readonly NormDecl[] = [
  RMS_NORM_DECL,
  {
    spec: rmsNormBackward,
    inputs: ['dy', 'x', 'weight'],
    output: 'dx',
    columnSums: ['dweight'],
    sources: { dy: reused, x: reused, weight: column },
    registers: 3,
    // dx = s · dy · w − c · x with c = s³ · Σ(dy · w · x) / n; dweight += dy · x · s.
    row: (r) => {
      const [squares, gx] = r.tile.reduce(r.reducer, ['sum', 'sum'], (slot, j) => {
        const x = slot.get('x')[j]!;
        const g = mul(r, slot.get('dy')[j]!, slot.get('weight')[j]!);
        return [mul(r, x, x), mul(r, g, x)];
      });
      const s = inverseRms(r, squares!);
      const c = r.k.div('f32', f32(r), mul(r, mul(r, mul(r, s, s), s), gx!), r.count, 'rn');
      const negC = r.k.neg('f32', f32(r), c);
      r.tile.each((slot) => {
        const dy = slot.get('dy');
        const x = slot.get('x');
        const w = slot.get('weight');
        const dx = dy.map((d, j) => r.k.fma('f32', f32(r), negC, x[j]!, mul(r, mul(r, s, d), w[j]!)));
        r.tile.write(slot, r.out, dx);
        r.sums!.add(slot, [dy.map((d, j) => mul(r, mul(r, d, x[j]!), s))]);
      });
    },
  },
  {
    spec: layerNorm,
    inputs: ['x', 'gamma', 'beta'],
    output: 'y',
    columnSums: [],
    sources: { x: reused, gamma: column, beta: column },
    registers: 2,
    // y = (x − mean) · s · gamma + beta
    row: (r) => {
      const scale = centreAndScale(r);
      r.tile.store(r.out, (slot) =>
        slot.get('centred').map((d, j) => {
          const xhat = mul(r, d, scale);
          return r.k.fma('f32', f32(r), xhat, slot.get('gamma')[j]!, slot.get('beta')[j]!);
        }),
      );
    },
  },
  {
    spec: layerNormBackward,
    inputs: ['dy', 'x', 'gamma'],
    output: 'dx',
    columnSums: ['dgamma', 'dbeta'],
    sources: { dy: reused, x: reused, gamma: column },
    registers: 4,
    // With x̂ = (x − mean) · s and g = dy · gamma: dx = s · (g − mean(g) − x̂ · mean(g · x̂));
    // dgamma += dy · x̂, dbeta += dy.
    row: (r) => {
      const scale = centreAndScale(r);
      r.tile.derive('xhat', (slot) => slot.get('centred').map((d) => mul(r, d, scale)));
      const xhat = (slot: Slot, j: number) => slot.get('xhat')[j]!;
      const [sumG, sumGXhat] = r.tile.reduce(r.reducer, ['sum', 'sum'], (slot, j) => {
        const g = mul(r, slot.get('dy')[j]!, slot.get('gamma')[j]!);
        return [g, mul(r, g, xhat(slot, j))];
      });
      const meanG = mean(r, sumG!);
      const negMeanGXhat = r.k.neg('f32', f32(r), mean(r, sumGXhat!));
      r.tile.each((slot) => {
        const dy = slot.get('dy');
        const xh = dy.map((_, j) => xhat(slot, j));
        const dx = dy.map((d, j) => {
          const centred = sub(r, mul(r, d, slot.get('gamma')[j]!), meanG);
          return mul(r, scale, r.k.fma('f32', f32(r), xh[j]!, negMeanGXhat, centred));
        });
        r.tile.write(slot, r.out, dx);
        r.sums!.add(slot, [dy.map((d, j) => mul(r, d, xh[j]!)), dy]);
      });
    },
  },
];

export function normEntry(decl: NormDecl): string {
  return entryNameOf(decl.spec.name);
}

export function normKey(
  decl: NormDecl,
  g: RowGeometry,
  type: FloatStorage = 'f32',
  outType: FloatStorage = type,
): string {
  const types = outType === type ? [type] : [type, outType];
  return `normalization/${decl.spec.name}/${geometryKey(g)}${storageKey(types)}`;
}

/**
 * The module of one kernel; its inputs are stored as `type`, its row output
 * as `outType` (rmsNorm's attrs.out), the column sums' partials as f32.
 */
export function normModule(
  decl: NormDecl,
  g: RowGeometry,
  type: FloatStorage = 'f32',
  outType: FloatStorage = type,
): PtxModule {
  const partials = decl.columnSums.length > 0 ? ['partials'] : [];
  return rowKernelModule({
    entry: normEntry(decl),
    geometry: g,
    type,
    ...(outType === type ? {} : { storage: { [decl.output]: outType } }),
    pointers: [...decl.inputs, decl.output, ...partials],
    floats: ['eps'],
    sources: decl.sources,
    // Short: the GEMV after a decode step's norm prefetches its weights meanwhile (weightPrefetch).
    triggerDependents: true,
    build: (kernel) => {
      const count = countAsF32(kernel.k, kernel.n);
      const sums =
        partials.length > 0
          ? new ColumnSums(kernel.k, kernel.tile, kernel.pointer('partials'), decl.columnSums.length)
          : undefined;
      const r: NormRow = {
        ...kernel,
        count,
        eps: kernel.float('eps'),
        out: kernel.pointer(decl.output),
        sums,
      };
      return { row: () => decl.row(r), finish: () => sums?.flush() };
    },
  });
}

/** The geometry for rows of `n` of these operands. */
export function normGeometry(decl: NormDecl, n: number, pointers: readonly bigint[]): RowGeometry {
  return planRows(n, accessWidth(n, pointers), decl.registers);
}

function launchNorm(
  encoder: KernelEncoder,
  decl: NormDecl,
  operands: Operand[],
  rows: number,
  n: number,
  eps: number,
) {
  const [out, ...sumOuts] = operands.slice(decl.inputs.length);
  const g = normGeometry(
    decl,
    n,
    [...operands.slice(0, decl.inputs.length), out!].map((o) => o.ptr),
  );
  const args: Record<string, LaunchValue> = { rows, n, eps, [decl.output]: out! };
  decl.inputs.forEach((name, i) => {
    args[name] = operands[i]!;
  });
  let grid = rowGrid(encoder.device, g, rows);
  let partials = 0n;
  if (sumOuts.length > 0) {
    grid = columnSumGrid(encoder.device, g, rows, n, sumOuts.length);
    partials = columnPartials(encoder, decl.spec.name, g, grid, n, sumOuts.length);
    args.partials = partials;
  }
  const type = storageOf(operands[0]!);
  const outType = storageOf(out!);
  encoder.launch({
    key: normKey(decl, g, type, outType),
    module: () => normModule(decl, g, type, outType),
    entry: normEntry(decl),
    grid,
    block: g.block,
    args,
  });
  if (sumOuts.length > 0) sumColumns(encoder, partials, grid, n, sumOuts as Operand[]);
}

function normKernel(decl: NormDecl): AnyCudaKernel {
  return cudaKernel(
    decl.spec,
    (encoder, { inputs, outputs, attrs, io }) => {
      const out = outputs[0]!;
      const shape = io.inputs[0]!.shape;
      const n = shape[shape.length - 1]!;
      if (out.size === 0) {
        // No rows: the per-column sums over them are 0.
        for (const sum of outputs.slice(1)) fillZero(encoder, sum);
        return;
      }
      checkElementCount(decl.spec.name, decl.inputs[0]!, out.size);
      launchNorm(encoder, decl, [...inputs.map((x) => x!), ...outputs], out.size / n, n, attrs.eps);
    },
    { dtypes: FLOAT },
  );
}

export const NORMALIZATION_KERNELS: readonly AnyCudaKernel[] = NORM_DECLS.map(normKernel);

/**
 * rmsNorm(x, weight, eps) of x [M, K] into scratch of x's dtype: how a
 * product that cannot fold a `normWeight` (core's foldedNorm.ts) takes it,
 * the norm first.
 */
export function normedScratch(encoder: KernelEncoder, x: Operand, weight: Operand, eps: number): Operand {
  const out: Operand = { ...x, ptr: encoder.scratch(Math.max(x.byteLength, 4)) };
  if (x.size === 0) return out;
  const n = x.shape[x.shape.length - 1]!;
  launchNorm(encoder, RMS_NORM_DECL, [x, weight, out], x.size / n, n, eps);
  return out;
}
