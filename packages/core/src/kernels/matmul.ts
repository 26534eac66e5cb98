import { type DType, type HostArray, isHalf, roundedToHalf } from '../dtype.js';
import { defineKernel, type KernelIO } from '../kernel.js';
import { ArgCheck } from './check.js';
import { bytesOf, FLOAT, type OutDType, outDtypeAttr, outDtypeOf, RESIDUALS, WEIGHTS } from './vocabulary.js';

const FAMILY = 'matmul';

/**
 * The shared dimension K of `rows`·K elements. Derived from the element count
 * rather than the input metadata, so that callers may pass the outputs only.
 */
function innerDim(length: number, rows: number): number {
  return rows === 0 ? 0 : length / rows;
}

// ---- precision -----------------------------------------------------------------

/**
 * How f32 products may be computed: `'f32'` (the default) sums exact f32
 * products; `'tf32'` lets a backend round a and b to tf32 (10 mantissa bits,
 * f32's exponent) on tensor cores and sum in f32, as PyTorch's `allow_tf32`.
 * `'half'` rounds the f32 operands to a half dtype (b's where b is half, else
 * a's, else bf16) and sums the products in f32, the output keeping a's dtype:
 * the mixed-precision product of a model's prompt, f32 activations times half
 * weights on tensor cores (the reference rounds the same way; a backend may
 * keep more precision, e.g. for GEMV shapes). Operands already half are
 * unaffected. A backend without tf32 computes in f32, more precisely than asked.
 */
export const MATMUL_PRECISIONS = ['f32', 'tf32', 'half'] as const;
export type MatmulPrecision = (typeof MATMUL_PRECISIONS)[number];

const PRECISION = {
  kind: 'enum',
  values: MATMUL_PRECISIONS,
  default: 'f32',
  doc: "'f32' exact f32 products (default); 'tf32' allows a and b rounded to tf32 (10-bit mantissa) on tensor cores, summed in f32 (opt-in, as PyTorch's allow_tf32); 'half' rounds f32 operands to the half dtype of the other (bf16 where neither is half), summed in f32, y in a's dtype",
} as const;

/**
 * A backend feature (`BackendInfo.features`): its precision 'half' products
 * round f32 operands in a pass of their own before the tensor cores, so that
 * a producer writing the half operand itself (an `out` attribute) saves that
 * pass. Where it is absent a half operand costs a pass instead (widened) or
 * is multiplied in f32 anyway, and f32 producers do better.
 */
export const HALF_OPERAND_PASS = 'half-operand-pass';

/** The half dtype precision 'half' rounds f32 operands to: b's where b is half, else a's, else bf16. */
export function halfPrecisionDtype(a: DType, b: DType): 'f16' | 'bf16' {
  return isHalf(b) ? b : isHalf(a) ? a : 'bf16';
}

/**
 * a and b as precision `precision` multiplies them: under 'half', the f32
 * ones rounded (nearest even) to `halfPrecisionDtype` (exact in f32); else
 * as they are. The reference and the cpu backend's fast path share it.
 */
export function matmulOperands(
  precision: MatmulPrecision,
  io: KernelIO,
  a: HostArray,
  b: HostArray,
): [Float32Array, Float32Array] {
  if (precision !== 'half') return [a as Float32Array, b as Float32Array];
  const [ta, tb] = [io.inputs[0]!.dtype, io.inputs[1]!.dtype];
  const half = halfPrecisionDtype(ta, tb);
  const rounded = (x: HostArray, t: DType) =>
    t === 'f32' ? roundedToHalf(half, x as Float32Array) : (x as Float32Array);
  return [rounded(a, ta), rounded(b, tb)];
}

// ---- matmul ----------------------------------------------------------------

type MatmulAttrs = {
  alpha: number;
  beta: number;
  transA: boolean;
  transB: boolean;
  precision: MatmulPrecision;
  out: OutDType;
};

/** [M, K, N] of a valid call. */
function matmulDims(a: readonly number[], b: readonly number[], transA: boolean, transB: boolean) {
  const m = transA ? a[1]! : a[0]!;
  const k = transA ? a[0]! : a[1]!;
  const n = transB ? b[0]! : b[1]!;
  return [m, k, n] as const;
}

export const matmul = defineKernel<MatmulAttrs>({
  name: 'matmul',
  family: FAMILY,
  summary: 'y = alpha · op(a) · op(b) + beta · c, op = optional transpose (M = 1 is a GEMV)',
  inputs: [
    { name: 'a', dtypes: FLOAT, doc: '[M, K], or [K, M] with transA' },
    {
      name: 'b',
      dtypes: FLOAT,
      dtypeGroup: WEIGHTS,
      doc: "[K, N], or [N, K] with transB; may be half under f32 'a'",
    },
    {
      name: 'c',
      dtypes: FLOAT,
      dtypeGroup: RESIDUALS,
      optional: true,
      doc: "[M, N], added after scaling by beta; y's dtype (may be f32 under half 'a')",
    },
  ],
  attributes: {
    alpha: { kind: 'number', default: 1, doc: 'scales the product' },
    beta: { kind: 'number', default: 1, doc: "scales 'c' (unused without it)" },
    transA: { kind: 'boolean', default: false, doc: "'a' is stored as [K, M]" },
    transB: { kind: 'boolean', default: false, doc: "'b' is stored as [N, K]" },
    precision: PRECISION,
    out: outDtypeAttr("is c's where c is given, else a's"),
  },
  infer([a, b, c], { transA, transB, out }) {
    const check = new ArgCheck('matmul');
    check.rank('a', a!, 2, transA ? '[K, M]' : '[M, K]');
    check.rank('b', b!, 2, transB ? '[N, K]' : '[K, N]');
    const [m, k, n] = matmulDims(a!.shape, b!.shape, transA, transB);
    check.dim('b', b!, transB ? 1 : 0, k, "K of 'a'");
    if (c) check.sameShape('c', c, [m, n], 'the product [M, N]');
    const dtype = outDtypeOf(out, c?.dtype ?? a!.dtype);
    if (c) check.sameDType('c', c, dtype, "y's dtype (attrs.out)");
    return [{ name: 'y', shape: [m, n], dtype }];
  },
  reference([a0, b0, c], { alpha, beta, transA, transB, precision }, io) {
    const [a, b] = matmulOperands(precision, io, a0!, b0!);
    const [m, n] = io.outputs[0]!.shape as [number, number];
    const k = innerDim(a.length, m);
    const y = new Float32Array(m * n);
    const row = new Float64Array(n);
    // i, p, j order: each step adds a scaled row of op(b) to a row of y.
    for (let i = 0; i < m; i++) {
      row.fill(0);
      for (let p = 0; p < k; p++) {
        const aip = transA ? a![p * m + i]! : a![i * k + p]!;
        for (let j = 0; j < n; j++) row[j]! += aip * (transB ? b![j * k + p]! : b![p * n + j]!);
      }
      for (let j = 0; j < n; j++) y[i * n + j] = alpha * row[j]! + (c ? beta * c[i * n + j]! : 0);
    }
    return [y];
  },
  cost([a, b, c], { transA, transB, out }) {
    const [m, k, n] = matmulDims(a!.shape, b!.shape, transA, transB);
    const dtype = outDtypeOf(out, c?.dtype ?? a!.dtype);
    return {
      flops: 2 * m * n * k + (c ? 2 * m * n : 0),
      bytes: bytesOf(a) + bytesOf(b) + bytesOf(c) + bytesOf({ shape: [m, n], dtype }),
    };
  },
});

// ---- batched -------------------------------------------------------------------

type BatchedMatmulAttrs = { alpha: number; transA: boolean; transB: boolean; precision: MatmulPrecision };

/** [B, M, K, N] of a valid call. */
function batchedDims(a: readonly number[], b: readonly number[], transA: boolean, transB: boolean) {
  const [m, k, n] = matmulDims(a.slice(1), b.slice(1), transA, transB);
  return [a[0]!, m, k, n] as const;
}

export const batchedMatmul = defineKernel<BatchedMatmulAttrs>({
  name: 'batchedMatmul',
  family: FAMILY,
  summary: 'y[i] = alpha · op(a[i]) · op(b[i]) for each batch index i',
  inputs: [
    { name: 'a', dtypes: FLOAT, doc: '[B, M, K], or [B, K, M] with transA' },
    { name: 'b', dtypes: FLOAT, doc: '[B, K, N], or [B, N, K] with transB' },
  ],
  attributes: {
    alpha: { kind: 'number', default: 1, doc: 'scales the product' },
    transA: { kind: 'boolean', default: false, doc: "each 'a[i]' is stored as [K, M]" },
    transB: { kind: 'boolean', default: false, doc: "each 'b[i]' is stored as [N, K]" },
    precision: PRECISION,
  },
  infer([a, b], { transA, transB }) {
    const check = new ArgCheck('batchedMatmul');
    check.rank('a', a!, 3, transA ? '[B, K, M]' : '[B, M, K]');
    check.rank('b', b!, 3, transB ? '[B, N, K]' : '[B, K, N]');
    const [batch, m, k, n] = batchedDims(a!.shape, b!.shape, transA, transB);
    check.dim('b', b!, 0, batch, "the batch size B of 'a'");
    check.dim('b', b!, transB ? 2 : 1, k, "K of 'a'");
    return [{ name: 'y', shape: [batch, m, n], dtype: a!.dtype }];
  },
  reference([a0, b0], { alpha, transA, transB, precision }, io) {
    const [a, b] = matmulOperands(precision, io, a0!, b0!);
    const [batch, m, n] = io.outputs[0]!.shape as [number, number, number];
    const k = innerDim(a.length, batch * m);
    const y = new Float32Array(batch * m * n);
    const row = new Float64Array(n);
    for (let s = 0; s < batch; s++) {
      const a0 = s * m * k;
      const b0 = s * k * n;
      const y0 = s * m * n;
      for (let i = 0; i < m; i++) {
        row.fill(0);
        for (let p = 0; p < k; p++) {
          const aip = transA ? a![a0 + p * m + i]! : a![a0 + i * k + p]!;
          for (let j = 0; j < n; j++) row[j]! += aip * (transB ? b![b0 + j * k + p]! : b![b0 + p * n + j]!);
        }
        for (let j = 0; j < n; j++) y[y0 + i * n + j] = alpha * row[j]!;
      }
    }
    return [y];
  },
  cost([a, b], { transA, transB }) {
    const [batch, m, k, n] = batchedDims(a!.shape, b!.shape, transA, transB);
    return {
      flops: 2 * batch * m * n * k,
      bytes: bytesOf(a) + bytesOf(b) + bytesOf({ shape: [batch, m, n], dtype: a!.dtype }),
    };
  },
});
