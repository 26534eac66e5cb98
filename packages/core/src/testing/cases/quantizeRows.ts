import { quantizeRows } from '../../kernels/quantizeRows.js';
import { QUANT_FORMATS, type QuantFormat, quantLayout } from '../../quant/layout.js';
import { defaultScaleDType, type ScaleDType } from '../../quant/quantize.js';
import {
  type AnyConformanceCase,
  type FamilyCases,
  f32,
  type InputSample,
  invalidCalls,
  valid,
} from '../cases.js';
import type { Rng } from '../random.js';

/**
 * Weights whose rows each stress something: Gaussian rows of very different
 * sizes, a row with one outlier per group, a constant row, a row of zeros but
 * for its last group's first weight, and a row whose first group is zero and
 * holds a ±0 mix.
 */
function weights(n: number, k: number): InputSample {
  return f32([n, k], (rng: Rng, size: number) => {
    const w = new Float64Array(size);
    for (let row = 0; row < n; row++) {
      const kind = row % 5;
      const size = 2 ** rng.int(-12, 4);
      for (let c = 0; c < k; c++) {
        const normal = (rng.uniform(-1, 1) + rng.uniform(-1, 1) + rng.uniform(-1, 1)) * size;
        w[row * k + c] =
          kind === 0
            ? normal
            : kind === 1
              ? c % 32 === 7
                ? 40 * size * (c % 64 === 7 ? 1 : -1)
                : normal
              : kind === 2
                ? -0.375 * size
                : kind === 3
                  ? c === Math.floor((k - 1) / 32) * 32
                    ? size
                    : 0
                  : c < 32
                    ? c % 2
                      ? -0
                      : 0
                    : normal;
      }
    }
    return w;
  });
}

const cases: AnyConformanceCase[] = [];
// [N, K]: K inside one block, odd K across partial blocks and groups (a q8g16 row's padding half-block), and
// K past a q4g128 group; N covers the five row kinds.
const SHAPES = [
  [5, 7],
  [6, 161],
  [5, 300],
] as const;
// q4k, q5k and q6k take rows of whole super-blocks: one, two and three of them.
const SUPER_BLOCK_SHAPES = [
  [5, 256],
  [6, 512],
  [3, 768],
] as const;

/**
 * Weights whose sub-blocks of 16 each have a magnitude of their own, some
 * all positive and some all negative, so that a super-block's sub-block
 * scales and mins spread over their 6 and 8 bits.
 */
function spreadSubBlocks(n: number, k: number): InputSample {
  return f32([n, k], (rng: Rng, size: number) => {
    const w = new Float64Array(size);
    for (let at = 0; at < size; at += 16) {
      const magnitude = 2 ** rng.int(-7, 3);
      const sign = rng.int(0, 3); // 0: mixed, 1: positive, 2: negative
      for (let i = at; i < at + 16; i++) {
        const x = rng.uniform(0, 1) * magnitude;
        w[i] = sign === 1 ? x : sign === 2 ? -x : rng.uniform(-1, 1) * magnitude;
      }
    }
    return w;
  });
}

function push(format: QuantFormat, scaleDType: ScaleDType, zeroPoints: boolean): void {
  const superBlocks = quantLayout(format, 1).subBlockScales;
  for (const [n, k] of superBlocks ? SUPER_BLOCK_SHAPES : SHAPES) {
    const samples = superBlocks ? [weights(n, k), spreadSubBlocks(n, k)] : [weights(n, k)];
    for (const [i, sample] of samples.entries()) {
      cases.push(
        valid(quantizeRows, {
          label: `${format} ${n}×${k} ${scaleDType} scales${zeroPoints ? ' zero points' : ''}${i ? ', spread sub-blocks' : ''}`,
          inputs: [sample],
          attrs: { format, scaleDType, zeroPoints },
          tolerance: { rtol: 0, atol: 0 },
        }),
      );
    }
  }
}

for (const format of QUANT_FORMATS) {
  push(format, defaultScaleDType(format), false);
  if (quantLayout(format, 1).zeroPoints) push(format, defaultScaleDType(format), true);
}
push('q4g32', 'bf16', false);
push('q8', 'f16', false);
push('q4k', 'f32', false);
push('q6k', 'bf16', false);
push('q5k', 'f32', false);
push('q5g32', 'f32', false);
push('q5g32a', 'bf16', false);

// A NaN, +Inf and −Inf weight each in one group (the host quantizer refuses them): that group's scale (and
// offset) NaN, its codes and zero point 0 (a super-block's sub-block scales 0), every other group quantized.
function nonFinite(n: number, k: number): InputSample {
  return f32([n, k], (rng: Rng, size: number) => {
    const w = Array.from({ length: size }, () => rng.uniform(-1, 1));
    w[5] = Number.NaN;
    w[k + 40] = Number.POSITIVE_INFINITY;
    w[size - 1] = Number.NEGATIVE_INFINITY;
    return w;
  });
}
for (const [format, zeroPoints, k] of [
  ['q4g32', true, 70],
  ['q8', false, 70],
  ['q8g32a', false, 70],
  ['q4k', false, 512],
  ['q6k', false, 512],
  ['q5k', false, 512],
  ['q5g32', false, 70],
  ['q5g32a', false, 70],
] as const) {
  cases.push(
    valid(quantizeRows, {
      label: `${format} 3×${k} with non-finite weights${zeroPoints ? ', zero points' : ''}`,
      inputs: [nonFinite(3, k)],
      attrs: { format, scaleDType: defaultScaleDType(format), zeroPoints },
      tolerance: { rtol: 0, atol: 0 },
    }),
  );
}

const errors = invalidCalls(quantizeRows, [
  ["'w' of rank 1", [f32([40])], 'shape', 'w', { format: 'q8', scaleDType: 'f32' }],
  [
    'zero points with q8',
    [f32([2, 40])],
    'argument',
    'attrs.zeroPoints',
    { format: 'q8', scaleDType: 'f32', zeroPoints: true },
  ],
  [
    'zero points with q4g32a',
    [f32([2, 40])],
    'argument',
    'attrs.zeroPoints',
    { format: 'q4g32a', scaleDType: 'f32', zeroPoints: true },
  ],
  ['q4k rows of 300', [f32([2, 300])], 'shape', 'w', { format: 'q4k', scaleDType: 'f16' }],
  ['q6k rows of 128', [f32([2, 128])], 'shape', 'w', { format: 'q6k', scaleDType: 'f16' }],
  ['q5k rows of 320', [f32([2, 320])], 'shape', 'w', { format: 'q5k', scaleDType: 'f16' }],
]);

export const quantizeRowsCases: FamilyCases = { cases, errors };
