import * as k from '../../kernels/quantizedGateUp.js';
import { GATE_UP_FORMATS } from '../../kernels/quantizedGateUp.js';
import { type QuantFormat, quantLayout } from '../../quant/layout.js';
import {
  type AnyConformanceCase,
  type AnyErrorCase,
  type FamilyCases,
  f32,
  type InputSample,
  invalidCalls,
  type Tolerance,
  valid,
} from '../cases.js';
import { quantOffsets, quantScales, quantWords } from '../quantizedInputs.js';

const cases: AnyConformanceCase[] = [];
const errors: AnyErrorCase[] = [];

/**
 * Both products carry quantizedMatmul's f32 summation error (about sqrt(K)
 * roundings of terms near 1, with |w| <= about 1); y multiplies one product
 * by silu of the other, whose size grows like sqrt(K), so the absolute
 * bound grows like K.
 */
function tolerance(depth: number): Tolerance {
  return { rtol: 2e-4, atol: 2e-5 * Math.max(depth, 1) };
}

/**
 * gatePacked, gateScales, upPacked, upScales, both zero points or none (q4k:
 * both weights' sub-block scales), then both offsets where the format has
 * them (q4g32a, q8g32a; q4k's dmin).
 */
function weightsOf(
  format: QuantFormat,
  n: number,
  kd: number,
  zeroPoints: boolean,
): (InputSample | undefined)[] {
  const layout = quantLayout(format, kd);
  const packed = () => quantWords([n, layout.rowWords]);
  const main = [packed(), quantScales(format, n, kd), packed(), quantScales(format, n, kd)];
  const zeros = () => quantWords([n, layout.zeroWords]);
  const hasZeros = layout.subBlockScales || zeroPoints;
  if (!layout.offsets) return hasZeros ? [...main, zeros(), zeros()] : main;
  const offsets = () => quantOffsets(format, n, kd)!;
  return [...main, ...(hasZeros ? [zeros(), zeros()] : [undefined, undefined]), offsets(), offsets()];
}

// [M, K, N]: decoding's one row and the few rows of a small batch, more rows (several blocks of
// rows on a GPU); K inside one block, across partial blocks and groups, and long enough to be split;
// N at 1, primes and non-multiples of the columns a warp or block takes.
const SHAPES = [
  [1, 1, 1],
  [1, 7, 13],
  [1, 257, 61],
  [1, 2048, 67],
  [2, 100, 37],
  [3, 1000, 9],
  [4, 33, 129],
  [5, 160, 21],
  [9, 64, 5],
] as const;

// q4k: K of one, two, three and eight super-blocks.
const SUPER_BLOCK_SHAPES = [
  [1, 256, 1],
  [1, 512, 61],
  [1, 2048, 67],
  [2, 768, 37],
  [4, 256, 129],
  [5, 512, 21],
] as const;

for (const format of GATE_UP_FORMATS) {
  const layout = quantLayout(format, 1);
  for (const [m, kd, n] of layout.subBlockScales ? SUPER_BLOCK_SHAPES : SHAPES) {
    for (const zeroPoints of layout.zeroPoints ? [false, true] : [false]) {
      cases.push(
        valid(k.quantizedGateUpSwiglu, {
          label: `${format} ${m}×${kd}→${n}${zeroPoints ? ' zero points' : ''}`,
          inputs: [f32([m, kd]), ...weightsOf(format, n, kd, zeroPoints)],
          attrs: { format },
          tolerance: tolerance(kd),
        }),
      );
    }
  }
  // rmsNorm(x) folded in: one row, and a few for one format of each kind of code (a shader each to
  // compile on lavapipe).
  const normedShapes: [number, number, number][] = [layout.subBlockScales ? [1, 512, 61] : [1, 257, 61]];
  if (['q8', 'q4g32', 'q4k'].includes(format))
    normedShapes.push(layout.subBlockScales ? [3, 256, 37] : [3, 100, 37]);
  for (const [m, kd, n] of normedShapes) {
    cases.push(
      valid(k.quantizedGateUpSwiglu, {
        label: `${format} ${m}×${kd}→${n} normed`,
        inputs: [f32([m, kd]), ...padded(weightsOf(format, n, kd, false)), f32([kd])],
        attrs: { format, eps: 1e-5 },
        tolerance: tolerance(kd),
      }),
    );
  }
}

// `activations: 'int8'` (x may be taken as int8 blocks): each product moves by about 0.05·sqrt(K)
// (quantizedMatmul's int8 cases say why), y by that times the other product's size, about sqrt(K).
for (const format of ['q8', 'q4g32', 'q8g32', 'q4k'] as const) {
  const kd = quantLayout(format, 1).subBlockScales ? 512 : 257;
  cases.push(
    valid(k.quantizedGateUpSwiglu, {
      label: `${format} 1×${kd}→61 normed, int8 activations allowed`,
      inputs: [f32([1, kd]), ...padded(weightsOf(format, 61, kd, false)), f32([kd])],
      attrs: { format, eps: 1e-5, activations: 'int8' },
      tolerance: { rtol: 2e-4, atol: 0.05 * kd },
    }),
  );
}

/** The weights' inputs padded to their 8 positions, so that normWeight comes ninth. */
function padded(inputs: (InputSample | undefined)[]): (InputSample | undefined)[] {
  return [...inputs, ...Array.from({ length: 8 - inputs.length }, () => undefined)];
}

const q8 = weightsOf('q8', 5, 40, false);
const q4 = weightsOf('q4g32', 5, 40, true);
const q4k = weightsOf('q4k', 5, 256, false);
errors.push(
  ...invalidCalls(k.quantizedGateUpSwiglu, [
    ["'x' of rank 1", [f32([40]), ...q8], 'shape', 'x', { format: 'q8' }],
    [
      "'upPacked' of another N",
      [f32([1, 40]), q8[0]!, q8[1]!, quantWords([4, 10]), q8[3]!],
      'shape',
      'upPacked',
      { format: 'q8' },
    ],
    [
      "'gatePacked' with the words of another K",
      [f32([1, 80]), ...q8],
      'shape',
      'gatePacked',
      { format: 'q8' },
    ],
    [
      "'upScales' of one per row under q4g32",
      [f32([1, 40]), q4[0]!, q4[1]!, q4[2]!, f32([5, 1])],
      'shape',
      'upScales',
      { format: 'q4g32' },
    ],
    [
      "'gateZeros' without 'upZeros'",
      [f32([1, 40]), ...q4.slice(0, 5)],
      'shape',
      'upZeros',
      { format: 'q4g32' },
    ],
    [
      'zero points with q8',
      [f32([1, 40]), ...q8, quantWords([5, 1]), quantWords([5, 1])],
      'shape',
      'gateZeros',
      { format: 'q8' },
    ],
    ['format missing', [f32([1, 40]), ...q8], 'argument', 'attrs.format'],
    [
      "'normWeight' of another K",
      [f32([1, 40]), ...padded(q8), f32([39])],
      'shape',
      'normWeight',
      { format: 'q8' },
    ],
    [
      'q4k with K of 300',
      [f32([1, 300]), ...weightsOf('q4k', 5, 300, false)],
      'shape',
      'x',
      { format: 'q4k' },
    ],
    [
      "q4k without 'gateOffsets'",
      [f32([1, 256]), ...q4k.slice(0, 6)],
      'shape',
      'gateOffsets',
      { format: 'q4k' },
    ],
    [
      'q4k without its sub-block scales',
      [f32([1, 256]), ...q4k.slice(0, 4)],
      'shape',
      'gateZeros',
      { format: 'q4k' },
    ],
    [
      'offsets with q4g32',
      [f32([1, 40]), ...q4, f32([5, 2]), f32([5, 2])],
      'shape',
      'gateOffsets',
      { format: 'q4g32' },
    ],
    [
      'q4g32a without offsets',
      [f32([1, 40]), ...weightsOf('q4g32a', 5, 40, false).slice(0, 4)],
      'shape',
      'gateOffsets',
      { format: 'q4g32a' },
    ],
    [
      'q6k, not a format of 4- or 8-bit codes',
      [f32([1, 256]), ...q4k.slice(0, 6)],
      'argument',
      'attrs.format',
      { format: 'q6k' as 'q4k' },
    ],
  ]),
);

export const quantizedGateUpCases: FamilyCases = { cases, errors };
