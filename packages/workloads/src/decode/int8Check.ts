import { type Backend, GATE_UP_FORMATS, type QuantFormat, quantizeWeights } from '@rayo/core';
import { int8ProductError, Rng, readNumbers, runQuantizedProduct } from '@rayo/core/testing';
import { QGEMV_INT8_FORMATS } from '@rayo/cuda-ptx';

// int8-check: the cuda backend's int8-activation GEMVs on the GPU, format by
// format, against the product of x's int8 blocks computed on the host in f64
// (core's int8ActivationBlocks): the same check the PTX interpreter's tests
// make, on the hardware and at sizes that take both the blocked and the
// persistent kernels. The result must be that product up to f32 rounding.

export interface Int8CheckCase {
  readonly format: QuantFormat;
  /** Rows of x, K, and N (columns of y). */
  readonly m: number;
  readonly k: number;
  readonly n: number;
  /** The fused gate·up·SwiGLU of two weights instead of one product with c. */
  readonly pair: boolean;
  /** An rmsNorm of x folded in (normWeight around 1, eps 1e-5). */
  readonly norm?: boolean;
}

/** The formats of the int8 GEMV's single products, and those of them a gate·up pair takes. */
const SINGLE_FORMATS: readonly QuantFormat[] = QGEMV_INT8_FORMATS;
const PAIR_FORMATS = GATE_UP_FORMATS.filter(
  (f) => SINGLE_FORMATS.includes(f) && f !== 'q8' && f !== 'q4g128',
);

/**
 * The default cases: each format narrow (the blocked kernel: N 1,000,
 * K 4,096, and 3 rows of K 768 with c) and wide (N 16,896 of K 512: the
 * persistent kernel on an H200's 132 SMs), and the pairs narrow and wide;
 * with a folded rmsNorm, each format narrow and wide, and the pairs narrow.
 */
export const INT8_CHECK_CASES: readonly Int8CheckCase[] = [
  ...SINGLE_FORMATS.flatMap((format) => [
    { format, m: 1, k: 4096, n: 1000, pair: false },
    { format, m: 3, k: 768, n: 1000, pair: false },
    { format, m: 1, k: 512, n: 16896, pair: false },
    { format, m: 1, k: 4096, n: 1000, pair: false, norm: true },
    { format, m: 1, k: 512, n: 16896, pair: false, norm: true },
  ]),
  ...PAIR_FORMATS.flatMap((format) => [
    { format, m: 1, k: 1024, n: 1000, pair: true },
    { format, m: 1, k: 512, n: 8448, pair: true },
    { format, m: 1, k: 1024, n: 1000, pair: true, norm: true },
  ]),
];

export interface Int8CheckResult {
  readonly case: Int8CheckCase;
  /** The largest |y − reference| over the elements' f32 bound, and the element. */
  readonly worst: number;
  readonly at: number;
  readonly ok: boolean;
}

/**
 * Runs one case on `backend` (opened with `qgemvActivations: 'int8'`) and
 * compares every element with the product of x's int8 blocks (core's
 * int8ProductError): within 4e-6 · Σ|w·x̃| + 1e-6, f32 rounding of the
 * chunks' sums and their scales.
 */
export async function int8Check(backend: Backend, c: Int8CheckCase, seed = 1): Promise<Int8CheckResult> {
  const { format, m, k, n, pair } = c;
  const rng = new Rng(seed + n + k);
  const random = (size: number, scale = 1) =>
    Float32Array.from({ length: size }, () => rng.uniform(-scale, scale));
  const weights = (pair ? [0, 1] : [0]).map(() => quantizeWeights(random(n * k, 0.05), [n, k], format));
  const norm = c.norm ? { weight: Float32Array.from(random(k), (v) => 1 + v / 2), eps: 1e-5 } : undefined;
  const inputs = { x: random(m * k), c: random(m * n), weights, m, ...(norm ? { norm } : {}) };
  const run = runQuantizedProduct(backend, inputs);
  try {
    const { worst, at } = int8ProductError(await readNumbers(run.out), inputs);
    return { case: c, worst, at, ok: worst <= 1 };
  } finally {
    run.dispose();
  }
}

/** One line of the check's table. */
export function int8CheckLine(r: Int8CheckResult): string {
  const { format, m, k, n, pair, norm } = r.case;
  const what = `${pair ? 'gate·up ' : ''}${format} ${m}×${k}→${n}${norm ? ' normed' : ''}`;
  return `${what.padEnd(28)} ${r.ok ? 'PASS' : 'FAIL'}  worst error ${r.worst.toPrecision(3)} of the bound${r.ok ? '' : ` at y[${r.at}]`}`;
}
