import * as k from '../../kernels/quantized.js';
import { type QuantFormat, quantLayout } from '../../quant/layout.js';
import {
  type AnyConformanceCase,
  type AnyErrorCase,
  type FamilyCases,
  f32,
  type InputSample,
  invalid,
  type Tolerance,
  valid,
} from '../cases.js';

const cases: AnyConformanceCase[] = [];
const errors: AnyErrorCase[] = [];

/**
 * The reference sums exactly dequantized weights in f64; a backend sums the
 * same K products in f32 in any order (grouping by scale changes only that).
 * The scales below keep |w| <= about 1, as matmul's cases do, so matmul's
 * bound holds: about sqrt(K) roundings, far below one misread code or scale.
 */
function tolerance(depth: number): Tolerance {
  return { rtol: 1e-4, atol: 2e-5 * Math.sqrt(Math.max(depth, 1)) };
}

/** Random words: every code, the row padding included (a kernel must not count it). */
function words(shape: readonly number[]): InputSample {
  return {
    shape,
    dtype: 'u32',
    init: (rng, size) => Array.from({ length: size }, () => rng.int(0, 2 ** 32)),
  };
}

/** Scales that keep |w| within about 1: 128 · 0.008 for q8, 15 · 0.066 for q4 with zero points. */
function scalesOf(format: QuantFormat, n: number, kd: number): InputSample {
  const [lo, hi] = format === 'q8' ? [0.002, 0.008] : [0.02, 0.066];
  return f32([n, quantLayout(format, kd).groups], (rng, size) =>
    Array.from({ length: size }, () => rng.uniform(lo, hi)),
  );
}

function weightOf(format: QuantFormat, n: number, kd: number, zeroPoints: boolean) {
  const layout = quantLayout(format, kd);
  return [
    words([n, layout.rowWords]),
    scalesOf(format, n, kd),
    zeroPoints ? words([n, layout.zeroWords]) : undefined,
  ] as const;
}

// [M, K, N]: the GEMV (M = 1) and small M of the streaming kernels, past
// them to the tiled ones; K inside one 32-weight block, across partial
// blocks and groups, and long; N at 1, primes and non-multiples of 8/64.
const SHAPES = [
  [1, 1, 1],
  [1, 7, 13],
  [1, 100, 61],
  [1, 257, 129],
  [1, 1024, 67],
  [1, 4096, 33],
  [2, 161, 37],
  [3, 640, 131],
  [4, 33, 257],
  [5, 129, 61],
  [8, 160, 17],
  [17, 129, 61],
  [37, 96, 33],
  [67, 61, 129],
] as const;

for (const format of ['q8', 'q4g32', 'q4g128'] as const) {
  for (const [m, kd, n] of SHAPES) {
    cases.push(
      valid(k.quantizedMatmul, {
        label: `${format} ${m}×${kd}→${n}`,
        inputs: [f32([m, kd]), ...weightOf(format, n, kd, false)],
        attrs: { format },
        tolerance: tolerance(kd),
      }),
    );
    if (format !== 'q8') {
      cases.push(
        valid(k.quantizedMatmul, {
          label: `${format} ${m}×${kd}→${n} zero points`,
          inputs: [f32([m, kd]), ...weightOf(format, n, kd, true)],
          attrs: { format },
          tolerance: tolerance(kd),
        }),
      );
    }
  }
  cases.push(
    valid(k.quantizedMatmul, {
      label: `${format} 1×1031→61 + c (beta=1 default)`,
      inputs: [f32([1, 1031]), ...weightOf(format, 61, 1031, false), f32([1, 61])],
      attrs: { format },
      tolerance: tolerance(1031),
    }),
    valid(k.quantizedMatmul, {
      label: `${format} 19×200→45 + c beta=-0.5`,
      inputs: [f32([19, 200]), ...weightOf(format, 45, 200, format !== 'q8'), f32([19, 45])],
      attrs: { format, beta: -0.5 },
      tolerance: tolerance(200),
    }),
    valid(k.quantizedMatmul, {
      label: `${format} 3×67→7 c absent, beta=3 unused`,
      inputs: [f32([3, 67]), ...weightOf(format, 7, 67, false)],
      attrs: { format, beta: 3 },
      tolerance: tolerance(67),
    }),
    valid(k.quantizedMatmul, {
      label: `${format} 2×300→9 wide x`,
      inputs: [f32([2, 300], 'wide'), ...weightOf(format, 9, 300, false)],
      attrs: { format },
      tolerance: tolerance(300 * 64),
    }),
  );
}

const [q8Words, q8Scales] = weightOf('q8', 5, 40, false);
const [q4Words, q4Scales, q4Zeros] = weightOf('q4g32', 5, 40, true);
errors.push(
  invalid(k.quantizedMatmul, {
    label: "'x' of rank 1",
    inputs: [f32([40]), q8Words, q8Scales],
    attrs: { format: 'q8' },
    error: 'shape',
    argument: 'x',
  }),
  invalid(k.quantizedMatmul, {
    label: 'rows of length 0',
    inputs: [f32([2, 0]), words([5, 0]), f32([5, 1])],
    attrs: { format: 'q8' },
    error: 'shape',
    argument: 'x',
  }),
  invalid(k.quantizedMatmul, {
    label: "'packed' with the words of another K",
    inputs: [f32([2, 80]), q8Words, q8Scales],
    attrs: { format: 'q8' },
    error: 'shape',
    argument: 'packed',
  }),
  invalid(k.quantizedMatmul, {
    label: "'packed' of q4 words under format q8",
    inputs: [f32([2, 40]), q4Words, q8Scales],
    attrs: { format: 'q8' },
    error: 'shape',
    argument: 'packed',
  }),
  invalid(k.quantizedMatmul, {
    label: "'scales' of one per row under q4g32",
    inputs: [f32([2, 40]), q4Words, q8Scales],
    attrs: { format: 'q4g32' },
    error: 'shape',
    argument: 'scales',
  }),
  invalid(k.quantizedMatmul, {
    label: "'scales' of another N",
    inputs: [f32([2, 40]), q4Words, f32([4, 2])],
    attrs: { format: 'q4g32' },
    error: 'shape',
    argument: 'scales',
  }),
  invalid(k.quantizedMatmul, {
    label: "'zeros' with q8",
    inputs: [f32([2, 40]), q8Words, q8Scales, words([5, 1])],
    attrs: { format: 'q8' },
    error: 'shape',
    argument: 'zeros',
  }),
  invalid(k.quantizedMatmul, {
    label: "'zeros' of a nibble per word",
    inputs: [f32([2, 40]), q4Words, q4Scales, words([5, 2])],
    attrs: { format: 'q4g32' },
    error: 'shape',
    argument: 'zeros',
  }),
  invalid(k.quantizedMatmul, {
    label: "'c' transposed",
    inputs: [f32([2, 40]), q4Words, q4Scales, q4Zeros, f32([5, 2])],
    attrs: { format: 'q4g32' },
    error: 'shape',
    argument: 'c',
  }),
  invalid(k.quantizedMatmul, {
    label: "'packed' as i32",
    inputs: [f32([2, 40]), { shape: q8Words.shape, dtype: 'i32', init: { int: [0, 100] } }, q8Scales],
    attrs: { format: 'q8' },
    error: 'dtype',
    argument: 'packed',
  }),
  invalid(k.quantizedMatmul, {
    label: 'format missing',
    inputs: [f32([2, 40]), q8Words, q8Scales],
    error: 'argument',
    argument: 'attrs.format',
  }),
  invalid(k.quantizedMatmul, {
    label: "format 'q3'",
    inputs: [f32([2, 40]), q8Words, q8Scales],
    attrs: { format: 'q3' as 'q8' },
    error: 'argument',
    argument: 'attrs.format',
  }),
);

export const quantizedCases: FamilyCases = { cases, errors };
