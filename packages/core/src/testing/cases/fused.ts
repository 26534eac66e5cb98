import { LINEAR_ACTIVATIONS, type LinearActivation } from '../../kernels/activations.js';
import * as k from '../../kernels/fused.js';
import { type FamilyCases, f32, invalidCalls, newFamilyCases, type Tolerance, valid } from '../cases.js';

const { cases, errors } = newFamilyCases();

/**
 * y multiplies two dot products of length K, each off by about sqrt(K) f32
 * roundings of terms near 1 in any summation order, and each near sqrt(K)
 * in size: the product's error grows about like K. One dropped or misread
 * term moves y by far more.
 */
function tolerance(depth: number): Tolerance {
  return { rtol: 1e-4, atol: 4e-5 * Math.max(depth, 1) };
}

// [M, K, N]: decode (M = 1), small M up to the streaming kernels' row limits
// and past them, chunks of a prompt, with K and N at 1, primes and non-multiples of 4/16/64.
const SHAPES = [
  [1, 1, 1],
  [1, 7, 13],
  [1, 257, 129],
  [1, 1024, 383],
  [1, 2048, 67],
  [2, 61, 67],
  [3, 640, 131],
  [5, 13, 257],
  [8, 129, 61],
  [16, 67, 129],
  [17, 129, 61],
  [37, 68, 33],
  // A prompt's chunk: in half storage (halfVariants) a backend may take tensor-core tiles here
  // (partial row and column tiles, K past one 64-wide stage, an odd N).
  [130, 72, 24],
  [40, 64, 71],
] as const;

for (const [m, kd, n] of SHAPES) {
  const weights = [f32([n, kd]), f32([n, kd])] as const;
  cases.push(
    valid(k.gateUpSwiglu, {
      label: `${m}×${kd}→${n}`,
      inputs: [f32([m, kd]), ...weights],
      tolerance: tolerance(kd),
    }),
    valid(k.gateUpSwiglu, {
      label: `${m}×${kd}→${n} rmsNorm`,
      inputs: [f32([m, kd]), ...weights, f32([kd], 'positive')],
      tolerance: tolerance(kd),
    }),
  );
}

cases.push(
  // Saturating gates (silu's tails) and a large eps that dominates mean(x²).
  valid(k.gateUpSwiglu, {
    label: '3×67→61 wide x',
    inputs: [f32([3, 67], 'wide'), f32([61, 67]), f32([61, 67])],
    tolerance: tolerance(67 * 8),
  }),
  valid(k.gateUpSwiglu, {
    label: '2×257→13 rmsNorm eps=0.5',
    inputs: [f32([2, 257]), f32([13, 257]), f32([13, 257]), f32([257])],
    attrs: { eps: 0.5 },
    tolerance: tolerance(257),
  }),
  // No terms: silu(0) · 0 = 0 everywhere, whatever y held.
  valid(k.gateUpSwiglu, {
    label: '3×0→5, K = 0',
    inputs: [f32([3, 0]), f32([5, 0]), f32([5, 0])],
    tolerance: tolerance(0),
  }),
  valid(k.gateUpSwiglu, {
    label: '1×13→7 eps=3 unused without normWeight',
    inputs: [f32([1, 13]), f32([7, 13]), f32([7, 13])],
    attrs: { eps: 3 },
    tolerance: tolerance(13),
  }),
);

errors.push(
  ...invalidCalls(k.gateUpSwiglu, [
    ["'x' of rank 1", [f32([7]), f32([3, 7]), f32([3, 7])], 'shape', 'x'],
    ["'wGate' of rank 1", [f32([2, 7]), f32([7]), f32([3, 7])], 'shape', 'wGate'],
    ["'wGate' stored [K, N]", [f32([2, 7]), f32([7, 3]), f32([7, 3])], 'shape', 'wGate'],
    ["'wUp' with another N", [f32([2, 7]), f32([3, 7]), f32([4, 7])], 'shape', 'wUp'],
    [
      "'normWeight' of length N rather than K",
      [f32([2, 7]), f32([3, 7]), f32([3, 7]), f32([3])],
      'shape',
      'normWeight',
    ],
    ["'normWeight' of rank 2", [f32([2, 7]), f32([3, 7]), f32([3, 7]), f32([1, 7])], 'shape', 'normWeight'],
    ['rmsNorm of rows of length 0', [f32([2, 0]), f32([3, 0]), f32([3, 0]), f32([0])], 'shape', 'x'],
    ['eps = 0', [f32([2, 7]), f32([3, 7]), f32([3, 7]), f32([7])], 'argument', 'attrs.eps', { eps: 0 }],
  ]),
);

// ---- rmsNormMatmul ---------------------------------------------------------------

/** One dot product of normalised terms up to about 2.5 in size (x / rms times a weight below 1.5). */
function productTolerance(depth: number): Tolerance {
  return { rtol: 1e-4, atol: 5e-5 * Math.sqrt(Math.max(depth, 1)) };
}

for (const [m, kd, n] of SHAPES) {
  cases.push(
    valid(k.rmsNormMatmul, {
      label: `${m}×${kd}→${n}`,
      inputs: [f32([m, kd]), f32([kd], 'positive'), f32([n, kd])],
      tolerance: productTolerance(kd),
    }),
  );
}
cases.push(
  valid(k.rmsNormMatmul, {
    label: '1×2048→4099, a long row of outputs',
    inputs: [f32([1, 2048]), f32([2048], 'positive'), f32([4099, 2048])],
    tolerance: productTolerance(2048),
  }),
  valid(k.rmsNormMatmul, {
    label: '3×61→7 eps=0.25, wide x and a signed norm weight',
    inputs: [f32([3, 61], 'wide'), f32([61]), f32([7, 61])],
    attrs: { eps: 0.25 },
    tolerance: productTolerance(61),
  }),
);

errors.push(
  ...invalidCalls(k.rmsNormMatmul, [
    ["'x' of rank 3", [f32([1, 2, 7]), f32([7]), f32([3, 7])], 'shape', 'x'],
    ['rows of length 0', [f32([2, 0]), f32([0]), f32([3, 0])], 'shape', 'x'],
    ["'normWeight' of length N rather than K", [f32([2, 7]), f32([3]), f32([3, 7])], 'shape', 'normWeight'],
    ["'w' stored [K, N]", [f32([2, 7]), f32([7]), f32([7, 3])], 'shape', 'w'],
    ["'w' of rank 1", [f32([2, 7]), f32([7]), f32([7])], 'shape', 'w'],
    ['eps < 0', [f32([2, 7]), f32([7]), f32([3, 7])], 'argument', 'attrs.eps', { eps: -1 }],
  ]),
);

// ---- rmsNormMatmul3 --------------------------------------------------------------

// [M, K, N0, N1, N2] (0: no such weight): the column split between weights
// falls inside and across blocks, with N_i at 1, primes and odd sizes.
const SHAPES3 = [
  [1, 1, 1, 1, 1],
  [1, 7, 13, 1, 3],
  [1, 257, 129, 31, 31],
  [1, 1024, 383, 67, 67],
  [2, 61, 67, 5, 0],
  [3, 640, 131, 17, 19],
  [5, 13, 1, 257, 2],
  [8, 129, 61, 9, 9],
  [16, 67, 7, 129, 0],
  [17, 129, 61, 11, 13],
  [1, 2048, 67, 0, 0],
  [4, 33, 1, 0, 0],
  // One row over weights of whole blocks of 8 rows (a backend may give a
  // block of columns a workgroup): K past 256 vector steps, a short last weight.
  [1, 2056, 256, 64, 64],
  [1, 520, 16, 8, 13],
] as const;

for (const [m, kd, ...ns] of SHAPES3) {
  const weights = ns.filter((n) => n > 0).map((n) => f32([n, kd]));
  cases.push(
    valid(k.rmsNormMatmul3, {
      label: `${m}×${kd}→${ns.filter((n) => n > 0).join('+')}`,
      inputs: [f32([m, kd]), f32([kd], 'positive'), ...weights],
      tolerance: productTolerance(kd),
    }),
  );
}
cases.push(
  valid(k.rmsNormMatmul3, {
    label: "1×2048→2053+509+509, a decode step's q, k and v",
    inputs: [f32([1, 2048]), f32([2048], 'positive'), f32([2053, 2048]), f32([509, 2048]), f32([509, 2048])],
    tolerance: productTolerance(2048),
  }),
  valid(k.rmsNormMatmul3, {
    label: '3×61→7+3+5 eps=0.25, wide x and a signed norm weight',
    inputs: [f32([3, 61], 'wide'), f32([61]), f32([7, 61]), f32([3, 61]), f32([5, 61])],
    attrs: { eps: 0.25 },
    tolerance: productTolerance(61),
  }),
);

errors.push(
  ...invalidCalls(k.rmsNormMatmul3, [
    ["'x' of rank 1", [f32([7]), f32([7]), f32([3, 7])], 'shape', 'x'],
    ['rows of length 0', [f32([2, 0]), f32([0]), f32([3, 0]), f32([3, 0])], 'shape', 'x'],
    [
      "'normWeight' of length N0 rather than K",
      [f32([2, 7]), f32([3]), f32([3, 7]), f32([2, 7])],
      'shape',
      'normWeight',
    ],
    ["'w0' stored [K, N0]", [f32([2, 7]), f32([7]), f32([7, 3]), f32([2, 7])], 'shape', 'w0'],
    ["'w1' with another K", [f32([2, 7]), f32([7]), f32([3, 7]), f32([2, 6])], 'shape', 'w1'],
    ["'w2' of rank 1", [f32([2, 7]), f32([7]), f32([3, 7]), f32([2, 7]), f32([7])], 'shape', 'w2'],
    ["'w2' without 'w1'", [f32([2, 7]), f32([7]), f32([3, 7]), undefined, f32([2, 7])], 'shape', 'w1'],
    ['eps = 0', [f32([2, 7]), f32([7]), f32([3, 7])], 'argument', 'attrs.eps', { eps: 0 }],
  ]),
);

// ---- linear and its backward -----------------------------------------------------

// [M, K, N]: one row (the GEMV paths), a few rows (the streaming kernels),
// past their row limits and past one tile of rows, K and N at primes and
// non-multiples of 4 and of the tile sizes.
const LINEAR_SHAPES = [
  [1, 7, 13],
  [3, 61, 67],
  [17, 129, 61],
  [130, 67, 33],
] as const;

/**
 * A linear case: x [M, K], w [N, K] and b [N] (`bias`: 'wide' values, or
 * false for none), its label noting `note`; `preActivation` only where given.
 */
function linearCase(
  m: number,
  kd: number,
  n: number,
  activation: LinearActivation,
  { note, preActivation, bias }: { note?: string; preActivation?: boolean; bias?: 'wide' | false } = {},
) {
  return valid(k.linear, {
    label: `${m}×${kd}→${n} ${activation}${note === undefined ? '' : `, ${note}`}`,
    inputs: bias === false ? [f32([m, kd]), f32([n, kd])] : [f32([m, kd]), f32([n, kd]), f32([n], bias)],
    attrs: preActivation === undefined ? { activation } : { activation, preActivation },
    tolerance: productTolerance(kd),
  });
}

for (const activation of LINEAR_ACTIVATIONS) {
  for (const [m, kd, n] of LINEAR_SHAPES) {
    cases.push(linearCase(m, kd, n, activation, { preActivation: activation !== 'none' }));
  }
}
cases.push(
  // Without a bias, without z, and with K long enough for the kernels to split it.
  linearCase(3, 61, 67, 'relu', { note: 'no bias', bias: false }),
  linearCase(130, 67, 33, 'gelu', { note: 'y only' }),
  linearCase(1, 515, 13, 'silu', { note: 'split K', preActivation: true }),
  linearCase(3, 515, 13, 'tanh', { note: 'split K', preActivation: true }),
  linearCase(33, 515, 9, 'gelu', { note: 'split K', preActivation: true }),
  linearCase(20, 515, 36, 'relu', { note: 'split K over tiles', preActivation: true }),
  linearCase(20, 64, 36, 'sigmoid', { note: 'multiples of 4', preActivation: true, bias: 'wide' }),
  // K = 0: y = act(b).
  valid(k.linear, {
    label: '3×0→5 gelu, K = 0',
    inputs: [f32([3, 0]), f32([5, 0]), f32([5], 'wide')],
    attrs: { activation: 'gelu', preActivation: true },
  }),
);

/** db sums M values of dy · act'(z), each below about 1.2 in size. */
function columnSumTolerance(rows: number): Tolerance {
  return { rtol: 1e-4, atol: 2e-5 * Math.sqrt(Math.max(rows, 1)) };
}

// [M, N]: rows from 1 to past a block's worth, N at 1, primes and non-multiples of 4.
const BACKWARD_SHAPES = [
  [1, 13],
  [3, 1],
  [17, 67],
  [130, 33],
  [1031, 7],
  [64, 257],
] as const;

for (const activation of LINEAR_ACTIVATIONS) {
  for (const [m, n] of BACKWARD_SHAPES) {
    cases.push(
      valid(k.biasActivationBackward, {
        label: `${m}×${n} ${activation}`,
        // Wide z reaches the saturating tails of gelu, silu, sigmoid and tanh.
        inputs: activation === 'none' ? [f32([m, n])] : [f32([m, n]), f32([m, n], 'wide')],
        attrs: { activation },
        tolerance: columnSumTolerance(m),
      }),
    );
  }
}
cases.push(
  valid(k.biasActivationBackward, {
    label: '0×5 relu, no rows: db = 0',
    inputs: [f32([0, 5]), f32([0, 5])],
    attrs: { activation: 'relu' },
  }),
);

errors.push(
  ...invalidCalls(k.linear, [
    ["'x' of rank 3", [f32([1, 2, 7]), f32([3, 7])], 'shape', 'x'],
    ["'w' stored [K, N]", [f32([2, 7]), f32([7, 3])], 'shape', 'w'],
    ["'bias' of length K rather than N", [f32([2, 7]), f32([3, 7]), f32([7])], 'shape', 'bias'],
    ["'bias' of rank 2", [f32([2, 7]), f32([3, 7]), f32([1, 3])], 'shape', 'bias'],
    [
      'an unknown activation',
      [f32([2, 7]), f32([3, 7])],
      'argument',
      'attrs.activation',
      { activation: 'swish' as never },
    ],
    [
      "preActivation with activation 'none'",
      [f32([2, 7]), f32([3, 7])],
      'argument',
      'attrs.preActivation',
      { preActivation: true },
    ],
  ]),
  ...invalidCalls(k.biasActivationBackward, [
    ["'dy' of rank 1", [f32([7])], 'shape', 'dy'],
    ["gelu without 'z'", [f32([2, 7])], 'shape', 'z', { activation: 'gelu' }],
    ["'z' of another shape", [f32([2, 7]), f32([7, 2])], 'shape', 'z', { activation: 'relu' }],
    ["'z' with activation 'none'", [f32([2, 7]), f32([2, 7])], 'shape', 'z'],
  ]),
);

export const fusedCases: FamilyCases = { cases, errors };
