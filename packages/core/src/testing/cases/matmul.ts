import * as k from '../../kernels/matmul.js';
import { type FamilyCases, f32, invalidCalls, newFamilyCases, type Tolerance, valid } from '../cases.js';
import { roundoffTolerance, TF32_UNIT_ROUNDOFF, UNIT_ROUNDOFF } from '../halfCases.js';
import { mistypedAttr } from '../mistypedAttr.js';

const { cases, errors } = newFamilyCases();

/**
 * A GPU sums the K products in f32 in any order: its error grows about like
 * sqrt(K) on these random inputs, far below this bound, while one dropped or
 * misread product (about 0.25 on average) is far above it.
 */
function tolerance(depth: number): Tolerance {
  return { rtol: 1e-4, atol: 2e-5 * Math.sqrt(Math.max(depth, 1)) };
}

const TRANSPOSES = [
  [false, false],
  [true, false],
  [false, true],
  [true, true],
] as const;

function flags(transA: boolean, transB: boolean): string {
  return [transA ? ' transA' : '', transB ? ' transB' : ''].join('');
}

function operands(m: number, kd: number, n: number, transA: boolean, transB: boolean) {
  return [f32(transA ? [kd, m] : [m, kd]), f32(transB ? [n, kd] : [kd, n])] as const;
}

// ---- matmul ----------------------------------------------------------------

// [M, K, N]: 1, primes and non-multiples of 4/16/64 on every axis, mixed.
const SHAPES = [
  [1, 1, 1],
  [3, 7, 13],
  [13, 61, 7],
  [7, 257, 3],
  [61, 67, 129],
  [67, 129, 61],
  [129, 13, 257],
  [257, 3, 67],
] as const;

for (const [m, kd, n] of SHAPES) {
  for (const [transA, transB] of TRANSPOSES) {
    cases.push(
      valid(k.matmul, {
        label: `${m}×${kd}×${n}${flags(transA, transB)}`,
        inputs: operands(m, kd, n, transA, transB),
        attrs: { transA, transB },
        tolerance: tolerance(kd),
      }),
    );
  }
}

// GEMV (M = 1), the decoding path: activations times weights, often stored [N, K].
for (const [kd, n] of [
  [257, 129],
  [640, 383],
  [1024, 1031],
] as const) {
  for (const [transA, transB] of TRANSPOSES) {
    cases.push(
      valid(k.matmul, {
        label: `GEMV 1×${kd}×${n}${flags(transA, transB)}`,
        inputs: operands(1, kd, n, transA, transB),
        attrs: { transA, transB },
        tolerance: tolerance(kd),
      }),
    );
  }
}

for (const transB of [false, true]) {
  cases.push(
    valid(k.matmul, {
      label: `257×300×263${flags(false, transB)}`,
      inputs: operands(257, 300, 263, false, transB),
      attrs: { transB },
      tolerance: tolerance(300),
    }),
  );
}

cases.push(
  valid(k.matmul, {
    label: '13×67×61 alpha=-1.5',
    inputs: operands(13, 67, 61, false, false),
    attrs: { alpha: -1.5 },
    tolerance: tolerance(67),
  }),
  valid(k.matmul, {
    label: '61×129×7 transA alpha=0.25',
    inputs: operands(61, 129, 7, true, false),
    attrs: { alpha: 0.25, transA: true },
    tolerance: tolerance(129),
  }),
  valid(k.matmul, {
    label: '7×13×3 + c (beta=1 default)',
    inputs: [...operands(7, 13, 3, false, false), f32([7, 3])],
    tolerance: tolerance(13),
  }),
  valid(k.matmul, {
    label: '67×61×129 + c alpha=0.5 beta=-2',
    inputs: [...operands(67, 61, 129, false, false), f32([67, 129])],
    attrs: { alpha: 0.5, beta: -2 },
    tolerance: tolerance(61),
  }),
  valid(k.matmul, {
    label: '13×257×61 transA transB + c alpha=-1 beta=0.75',
    inputs: [...operands(13, 257, 61, true, true), f32([13, 61])],
    attrs: { alpha: -1, beta: 0.75, transA: true, transB: true },
    tolerance: tolerance(257),
  }),
  valid(k.matmul, {
    label: 'GEMV 1×1031×257 transB + c beta=0.5',
    inputs: [...operands(1, 1031, 257, false, true), f32([1, 257])],
    attrs: { beta: 0.5, transB: true },
    tolerance: tolerance(1031),
  }),
  valid(k.matmul, {
    label: '3×7×13 c absent, beta=3 unused',
    inputs: operands(3, 7, 13, false, false),
    attrs: { beta: 3 },
    tolerance: tolerance(7),
  }),
);

// precision 'tf32': a and b may be rounded to tf32, so the bound is the half
// rule's with tf32's unit roundoff; large enough for tensor-core kernels.
// precision 'half': the reference rounds the f32 operands to bf16 (or to the
// half operand's dtype); a backend may keep more (e.g. exact f32), so the
// bound is the half rule's with bf16's unit roundoff.
const REDUCED_PRECISIONS = [
  {
    precision: 'tf32',
    roundoff: TF32_UNIT_ROUNDOFF,
    shapes: [
      [61, 67, 129, false, false, false],
      [257, 300, 263, false, false, false],
      [257, 300, 263, false, true, true],
      [129, 64, 136, true, false, true],
      [136, 72, 130, true, true, false],
    ],
  },
  {
    precision: 'half',
    roundoff: UNIT_ROUNDOFF.bf16,
    shapes: [
      [61, 67, 129, false, true, true],
      [136, 72, 130, false, false, false],
      [129, 64, 136, true, true, true],
      // A weight gradient's form, dW = dYᵀ · X: transA alone, K the rows of a batch.
      [67, 136, 72, true, false, false],
    ],
  },
] as const;
for (const { precision, roundoff, shapes } of REDUCED_PRECISIONS) {
  for (const [m, kd, n, transA, transB, withC] of shapes) {
    const inputs = [...operands(m, kd, n, transA, transB), ...(withC ? [f32([m, n])] : [])];
    const attrs = { transA, transB, precision, ...(withC ? { alpha: 0.5, beta: -1 } : {}) } as const;
    cases.push(
      valid(k.matmul, {
        label: `${m}×${kd}×${n}${flags(transA, transB)}${withC ? ' + c' : ''} precision ${precision}`,
        inputs,
        attrs,
        tolerance: roundoffTolerance(roundoff, { inputs, tolerance: tolerance(kd) }),
      }),
    );
  }
}

// attrs.out: a prompt's products read a bf16 activation its producer wrote
// (no cast pass) into f32 y and an f32 residual c, and y may be stored half.
for (const [m, kd, n, withC] of [
  [61, 67, 129, false],
  [136, 72, 130, true],
  [7, 33, 13, true],
] as const) {
  const half = (shape: readonly number[]) => ({ shape, dtype: 'bf16' as const });
  const inputs = [half([m, kd]), half([n, kd]), ...(withC ? [f32([m, n])] : [])];
  cases.push(
    valid(k.matmul, {
      label: `${m}×${kd}×${n} transB bf16 a and b${withC ? ' + f32 c' : ', out f32'} precision half`,
      inputs,
      attrs: { transB: true, precision: 'half', ...(withC ? {} : { out: 'f32' as const }) },
      tolerance: roundoffTolerance(UNIT_ROUNDOFF.bf16, { inputs, tolerance: tolerance(kd) }),
    }),
  );
}
// A batched decoding step's product: a few rows of f32 activations times half
// weights stored [N, K], under precision 'half' (cuda takes it on tensor cores
// with K split across blocks; M and N odd, K a whole number of 8 but not of 32).
{
  const [m, kd, n] = [5, 264, 67];
  const [a, b] = operands(m, kd, n, false, true);
  const inputs = [a, { ...b, dtype: 'bf16' as const }, f32([m, n])];
  cases.push(
    valid(k.matmul, {
      label: `${m}×${kd}×${n} transB + c precision half, bf16 b (a decoding batch)`,
      inputs,
      attrs: { transB: true, precision: 'half', alpha: 0.5, beta: -1 },
      tolerance: roundoffTolerance(UNIT_ROUNDOFF.bf16, { inputs, tolerance: tolerance(kd) }),
    }),
  );
}
{
  // A batch's half rows (its norm writes them) into an f32 residual: the products of a decode step of 12 streams.
  const [m, kd, n] = [12, 520, 72];
  const [a, b] = operands(m, kd, n, false, true);
  const inputs = [{ ...a, dtype: 'bf16' as const }, { ...b, dtype: 'bf16' as const }, f32([m, n])];
  cases.push(
    valid(k.matmul, {
      label: `${m}×${kd}×${n} transB + c, bf16 a and b, f32 c and y (a decoding batch's half rows)`,
      inputs,
      attrs: { transB: true, precision: 'half', beta: 1 },
      tolerance: roundoffTolerance(UNIT_ROUNDOFF.bf16, { inputs, tolerance: tolerance(kd) }),
    }),
  );
}
{
  const inputs = operands(13, 61, 67, false, true);
  cases.push(
    valid(k.matmul, {
      label: '13×61×67 transB out bf16',
      inputs,
      attrs: { transB: true, out: 'bf16' },
      tolerance: roundoffTolerance(UNIT_ROUNDOFF.bf16, { inputs, tolerance: tolerance(61) }),
    }),
  );
}

errors.push(
  ...invalidCalls(k.matmul, [
    ["'a' of rank 3", [f32([2, 3, 4]), f32([4, 5])], 'shape', 'a'],
    ["'b' of rank 1", [f32([3, 4]), f32([4])], 'shape', 'b'],
    ['K of a (7) != rows of b (5)', [f32([3, 7]), f32([5, 3])], 'shape', 'b'],
    ['transA: K is the first dimension of a', [f32([3, 7]), f32([7, 2])], 'shape', 'b', { transA: true }],
    ['transB: K is the second dimension of b', [f32([3, 7]), f32([7, 2])], 'shape', 'b', { transB: true }],
    ["'c' transposed", [f32([3, 7]), f32([7, 5]), f32([5, 3])], 'shape', 'c'],
    ["'c' of rank 1 (no broadcasting)", [f32([3, 7]), f32([7, 5]), f32([5])], 'shape', 'c'],
    mistypedAttr('alpha not a number', [f32([3, 7]), f32([7, 5])], 'alpha', '2'),
    mistypedAttr(
      "precision 'f16' (only 'f32', 'tf32' or 'half')",
      [f32([3, 7]), f32([7, 5])],
      'precision',
      'f16',
    ),
    [
      "'c' of another dtype than attrs.out names",
      [f32([3, 7]), f32([7, 5]), { shape: [3, 5], dtype: 'bf16' }],
      'dtype',
      'c',
      { out: 'f32' },
    ],
    mistypedAttr("out 'i32' (a float dtype or 'auto')", [f32([3, 7]), f32([7, 5])], 'out', 'i32'),
    mistypedAttr('transA not a boolean', [f32([3, 7]), f32([7, 5])], 'transA', 1),
  ]),
);

// ---- batchedMatmul -------------------------------------------------------------

// [B, M, K, N]
const BATCHED = [
  [1, 7, 13, 3],
  [3, 13, 61, 7],
  [5, 61, 67, 13],
  [3, 1, 129, 67],
] as const;

for (const [b, m, kd, n] of BATCHED) {
  for (const [transA, transB] of TRANSPOSES) {
    cases.push(
      valid(k.batchedMatmul, {
        label: `${b}×(${m}×${kd}×${n})${flags(transA, transB)}`,
        inputs: [f32(transA ? [b, kd, m] : [b, m, kd]), f32(transB ? [b, n, kd] : [b, kd, n])],
        attrs: { transA, transB },
        tolerance: tolerance(kd),
      }),
    );
  }
}
{
  const inputs = [f32([3, 136, 64]), f32([3, 64, 131])];
  cases.push(
    valid(k.batchedMatmul, {
      label: '3×(136×64×131) precision tf32',
      inputs,
      attrs: { precision: 'tf32' },
      tolerance: roundoffTolerance(TF32_UNIT_ROUNDOFF, { inputs, tolerance: tolerance(64) }),
    }),
  );
}
// precision 'half' in attention's forms: plain, scores (transA), weighted values (transB).
for (const [transA, transB] of [
  [false, false],
  [true, false],
  [false, true],
] as const) {
  const inputs = [f32(transA ? [3, 24, 40] : [3, 40, 24]), f32(transB ? [3, 33, 24] : [3, 24, 33])];
  cases.push(
    valid(k.batchedMatmul, {
      label: `3×(40×24×33)${flags(transA, transB)} precision half`,
      inputs,
      attrs: { transA, transB, precision: 'half', alpha: 2 },
      tolerance: roundoffTolerance(UNIT_ROUNDOFF.bf16, { inputs, tolerance: tolerance(24) }),
    }),
  );
}
cases.push(
  valid(k.batchedMatmul, {
    label: '5×(67×257×61) alpha=-0.5',
    inputs: [f32([5, 67, 257]), f32([5, 257, 61])],
    attrs: { alpha: -0.5 },
    tolerance: tolerance(257),
  }),
);

errors.push(
  ...invalidCalls(k.batchedMatmul, [
    ["'a' of rank 2", [f32([3, 7]), f32([1, 7, 5])], 'shape', 'a'],
    ["'b' of rank 2", [f32([1, 3, 7]), f32([7, 5])], 'shape', 'b'],
    ['batch sizes 3 and 5', [f32([3, 4, 7]), f32([5, 7, 2])], 'shape', 'b'],
    ['K of a (7) != K of b (6)', [f32([3, 4, 7]), f32([3, 6, 2])], 'shape', 'b'],
    [
      'transB: K is the last dimension of b',
      [f32([3, 4, 7]), f32([3, 7, 2])],
      'shape',
      'b',
      { transB: true },
    ],
  ]),
);

export const matmulCases: FamilyCases = { cases, errors };
