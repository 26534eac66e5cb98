import * as k from '../../kernels/quantized.js';
import { QUANT_FORMATS, type QuantFormat, quantLayout } from '../../quant/layout.js';
import {
  type AnyConformanceCase,
  type AnyErrorCase,
  type FamilyCases,
  f32,
  type InputSample,
  i32,
  invalid,
  type Tolerance,
  valid,
} from '../cases.js';
import { quantOffsets, quantScales, quantWords } from '../quantizedInputs.js';

const cases: AnyConformanceCase[] = [];
const errors: AnyErrorCase[] = [];

/**
 * The reference sums exactly dequantized weights in f64; a backend sums the
 * same K products in f32 in any order (grouping by scale changes only that).
 * The scales below keep |w| <= about 1, as matmul's cases do, so matmul's
 * bound holds: about sqrt(K) roundings, far below one misread code or scale.
 */
function tolerance(depth: number, format?: QuantFormat): Tolerance {
  // q4g32a's and q8g32a's values are q · scale − offset with both terms up to about 1: a kernel that sums
  // q · x and x apart and scales the sums cancels terms twice the size of w (hence twice the bound).
  const terms = format !== undefined && quantLayout(format, 1).offsets ? 2 : 1;
  return { rtol: 1e-4, atol: terms * 2e-5 * Math.sqrt(Math.max(depth, 1)) };
}

const offsetsOf = quantOffsets;

/**
 * The codes, scales and `zeros`: zero points where asked for, q4k's, q5k's and q6k's sub-block scales (random
 * words: every 6-bit scale and min, every int8 scale).
 */
function weightOf(format: QuantFormat, n: number, kd: number, zeroPoints: boolean) {
  const layout = quantLayout(format, kd);
  return [
    quantWords([n, layout.rowWords]),
    quantScales(format, n, kd),
    zeroPoints || layout.subBlockScales ? quantWords([n, layout.zeroWords]) : undefined,
  ] as const;
}

/** K as `format` takes it: q4k, q5k and q6k rows are whole super-blocks of 256, so their cases round K up to one. */
function depthFor(format: QuantFormat, kd: number): number {
  const layout = quantLayout(format, 1);
  return layout.subBlockScales ? Math.ceil(kd / layout.groupSize) * layout.groupSize : kd;
}

/** The inputs of y = x · dequant(W)ᵀ (+ c): x, the weight's parts, c, and q4g32a's offsets. */
function inputsOf(
  format: QuantFormat,
  x: InputSample,
  n: number,
  options: { zeroPoints?: boolean; c?: InputSample; normWeight?: InputSample } = {},
): (InputSample | undefined)[] {
  const kd = x.shape[1]!;
  const inputs = [x, ...weightOf(format, n, kd, options.zeroPoints ?? false), options.c];
  inputs.push(offsetsOf(format, n, kd), options.normWeight);
  while (inputs.length > 0 && inputs[inputs.length - 1] === undefined) inputs.pop();
  return inputs;
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

// The formats after q4g128 run the same kernels' branches on fewer shapes (the browser and lavapipe suites
// compile and run every case): the GEMV's vector and scalar x, 2–4 rows, the tiled path, K within a block,
// K just past a block (a q8g16 row's padding half-block) and past a group.
const GGML_SHAPES = SHAPES.filter(([m, kd]) => [7, 257, 1024, 640, 33, 129, 61].includes(kd) && m !== 5);
// q4k's, q5k's and q6k's K is whole super-blocks: one, two and four, and N at 1, primes and non-multiples of 8/64; M through
// the GEMV, 2–4 rows and the tiled path.
const SUPER_BLOCK_SHAPES = [
  [1, 256, 1],
  [1, 256, 61],
  [1, 1024, 67],
  [2, 512, 37],
  [3, 768, 33],
  [4, 256, 129],
  [17, 512, 61],
  [37, 256, 33],
] as const;

function shapesOf(format: QuantFormat): readonly (readonly [number, number, number])[] {
  const layout = quantLayout(format, 1);
  return layout.subBlockScales ? SUPER_BLOCK_SHAPES : layout.f32Values ? GGML_SHAPES : SHAPES;
}

for (const format of QUANT_FORMATS) {
  const zeroPoints = quantLayout(format, 1).zeroPoints;
  const depth = (kd: number) => depthFor(format, kd);
  for (const [m, kd, n] of shapesOf(format)) {
    cases.push(
      valid(k.quantizedMatmul, {
        label: `${format} ${m}×${kd}→${n}`,
        inputs: inputsOf(format, f32([m, kd]), n),
        attrs: { format },
        tolerance: tolerance(kd, format),
      }),
    );
    if (zeroPoints) {
      cases.push(
        valid(k.quantizedMatmul, {
          label: `${format} ${m}×${kd}→${n} zero points`,
          inputs: inputsOf(format, f32([m, kd]), n, { zeroPoints: true }),
          attrs: { format },
          tolerance: tolerance(kd, format),
        }),
      );
    }
  }
  cases.push(
    valid(k.quantizedMatmul, {
      label: `${format} 1×${depth(1031)}→61 + c (beta=1 default)`,
      inputs: inputsOf(format, f32([1, depth(1031)]), 61, { c: f32([1, 61]) }),
      attrs: { format },
      tolerance: tolerance(depth(1031), format),
    }),
    valid(k.quantizedMatmul, {
      label: `${format} 19×${depth(200)}→45 + c beta=-0.5`,
      inputs: inputsOf(format, f32([19, depth(200)]), 45, { zeroPoints, c: f32([19, 45]) }),
      attrs: { format, beta: -0.5 },
      tolerance: tolerance(depth(200), format),
    }),
    valid(k.quantizedMatmul, {
      label: `${format} 3×${depth(67)}→7 c absent, beta=3 unused`,
      inputs: inputsOf(format, f32([3, depth(67)]), 7),
      attrs: { format, beta: 3 },
      tolerance: tolerance(depth(67), format),
    }),
    // rmsNorm(x) folded in: decoding's row and a few (a kernel that folds it, or the norm first), with c.
    valid(k.quantizedMatmul, {
      label: `${format} 1×${depth(1024)}→67 normed`,
      inputs: inputsOf(format, f32([1, depth(1024)]), 67, { normWeight: f32([depth(1024)]) }),
      attrs: { format, eps: 1e-5 },
      tolerance: tolerance(depth(1024), format),
    }),
    // A few rows normed, with c: one format of each kind of code (a shader each to compile on lavapipe).
    ...(['q8', 'q4g32', 'q4k'].includes(format)
      ? [
          valid(k.quantizedMatmul, {
            label: `${format} 3×${depth(161)}→37 normed + c`,
            inputs: inputsOf(format, f32([3, depth(161)]), 37, {
              c: f32([3, 37]),
              normWeight: f32([depth(161)]),
            }),
            attrs: { format },
            tolerance: tolerance(depth(161), format),
          }),
        ]
      : []),
    valid(k.quantizedMatmul, {
      label: `${format} 2×${depth(300)}→9 wide x`,
      inputs: inputsOf(format, f32([2, depth(300)], 'wide'), 9),
      attrs: { format },
      tolerance: tolerance(depth(300) * 64, format),
    }),
  );
}

/**
 * With `activations: 'int8'` a backend may take x as int8 blocks: each x̂ moves by at most
 * max|x̂ of its block| / 254, about 1/127 of x's size (normed rows: a few times larger), so y by
 * that over K terms of |w| <= 1, summed as random errors: 0.05·sqrt(K) is several of their
 * standard deviations, and far below what a misread code or block scale moves.
 */
function int8Tolerance(depth: number): Tolerance {
  return { rtol: 1e-4, atol: 0.05 * Math.sqrt(Math.max(depth, 1)) };
}

// Every format a cuda int8 GEMV reads, one row and a few, and one row normed.
for (const format of ['q8', 'q4g32', 'q8g32', 'q4g32a', 'q4k', 'q5k', 'q6k', 'q5g32'] as const) {
  const kd = depthFor(format, 1024);
  for (const [m, normed] of [
    [1, false],
    [3, false],
    [1, true],
  ] as const) {
    cases.push(
      valid(k.quantizedMatmul, {
        label: `${format} ${m}×${kd}→67${normed ? ' normed' : ''}, int8 activations allowed`,
        inputs: inputsOf(format, f32([m, kd]), 67, normed ? { normWeight: f32([kd]) } : {}),
        attrs: { format, activations: 'int8' },
        tolerance: int8Tolerance(kd),
      }),
    );
  }
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
    inputs: [f32([2, 0]), quantWords([5, 0]), f32([5, 1])],
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
    inputs: [f32([2, 40]), q8Words, q8Scales, quantWords([5, 1])],
    attrs: { format: 'q8' },
    error: 'shape',
    argument: 'zeros',
  }),
  invalid(k.quantizedMatmul, {
    label: "'zeros' of a nibble per word",
    inputs: [f32([2, 40]), q4Words, q4Scales, quantWords([5, 2])],
    attrs: { format: 'q4g32' },
    error: 'shape',
    argument: 'zeros',
  }),
  invalid(k.quantizedMatmul, {
    label: "'normWeight' of another K",
    inputs: [f32([2, 40]), q8Words, q8Scales, undefined, undefined, undefined, f32([41])],
    attrs: { format: 'q8' },
    error: 'shape',
    argument: 'normWeight',
  }),
  invalid(k.quantizedMatmul, {
    label: "'normWeight' of rank 2",
    inputs: [f32([2, 40]), q8Words, q8Scales, undefined, undefined, undefined, f32([1, 40])],
    attrs: { format: 'q8' },
    error: 'shape',
    argument: 'normWeight',
  }),
  invalid(k.quantizedMatmul, {
    label: "'c' transposed",
    inputs: [f32([2, 40]), q4Words, q4Scales, q4Zeros, f32([5, 2])],
    attrs: { format: 'q4g32' },
    error: 'shape',
    argument: 'c',
  }),
  invalid(k.quantizedMatmul, {
    label: "'zeros' with q4g32a",
    inputs: [f32([2, 40]), q4Words, q4Scales, quantWords([5, 1]), undefined, f32([5, 2])],
    attrs: { format: 'q4g32a' },
    error: 'shape',
    argument: 'zeros',
  }),
  invalid(k.quantizedMatmul, {
    label: "q4g32a without 'offsets'",
    inputs: [f32([2, 40]), q4Words, q4Scales],
    attrs: { format: 'q4g32a' },
    error: 'shape',
    argument: 'offsets',
  }),
  invalid(k.quantizedMatmul, {
    label: "'offsets' with q4g32",
    inputs: [f32([2, 40]), q4Words, q4Scales, undefined, undefined, f32([5, 2])],
    attrs: { format: 'q4g32' },
    error: 'shape',
    argument: 'offsets',
  }),
  invalid(k.quantizedMatmul, {
    label: "'offsets' of one per row under q4g32a",
    inputs: [f32([2, 40]), q4Words, q4Scales, undefined, undefined, f32([5, 1])],
    attrs: { format: 'q4g32a' },
    error: 'shape',
    argument: 'offsets',
  }),
  invalid(k.quantizedMatmul, {
    label: "q5g32's 'packed' of q4g32's 4 words per group (no high words)",
    inputs: [f32([2, 40]), q4Words, q4Scales],
    attrs: { format: 'q5g32' },
    error: 'shape',
    argument: 'packed',
  }),
  invalid(k.quantizedMatmul, {
    label: "q5g32a without 'offsets'",
    inputs: [f32([2, 40]), quantWords([5, 12]), q4Scales],
    attrs: { format: 'q5g32a' },
    error: 'shape',
    argument: 'offsets',
  }),
  invalid(k.quantizedMatmul, {
    label: "'scales' of a q8g32 row under q8g16",
    inputs: [f32([2, 40]), q8Words, f32([5, 2])],
    attrs: { format: 'q8g16' },
    error: 'shape',
    argument: 'scales',
  }),
  invalid(k.quantizedMatmul, {
    label: "'offsets' as u32",
    inputs: [f32([2, 40]), q4Words, q4Scales, undefined, undefined, quantWords([5, 2])],
    attrs: { format: 'q4g32a' },
    error: 'dtype',
    argument: 'offsets',
  }),
  invalid(k.quantizedMatmul, {
    label: 'q4k with K of 300, not whole super-blocks',
    inputs: [f32([2, 300]), ...weightOf('q4k', 5, 300, false), undefined, f32([5, 2])],
    attrs: { format: 'q4k' },
    error: 'shape',
    argument: 'x',
  }),
  invalid(k.quantizedMatmul, {
    label: "q4k without its sub-block scales in 'zeros'",
    inputs: [f32([2, 256]), quantWords([5, 32]), f32([5, 1]), undefined, undefined, f32([5, 1])],
    attrs: { format: 'q4k' },
    error: 'shape',
    argument: 'zeros',
  }),
  invalid(k.quantizedMatmul, {
    label: "q4k's 'zeros' of one word per super-block",
    inputs: [f32([2, 256]), quantWords([5, 32]), f32([5, 1]), quantWords([5, 1]), undefined, f32([5, 1])],
    attrs: { format: 'q4k' },
    error: 'shape',
    argument: 'zeros',
  }),
  invalid(k.quantizedMatmul, {
    label: 'q4k without dmin offsets',
    inputs: [f32([2, 256]), ...weightOf('q4k', 5, 256, false)],
    attrs: { format: 'q4k' },
    error: 'shape',
    argument: 'offsets',
  }),
  invalid(k.quantizedMatmul, {
    label: 'q5k with K of 300, not whole super-blocks',
    inputs: [f32([2, 300]), ...weightOf('q5k', 5, 300, false), undefined, f32([5, 2])],
    attrs: { format: 'q5k' },
    error: 'shape',
    argument: 'x',
  }),
  invalid(k.quantizedMatmul, {
    label: "q5k's 'packed' of q4k's 32 words per super-block",
    inputs: [f32([2, 256]), quantWords([5, 32]), f32([5, 1]), quantWords([5, 3]), undefined, f32([5, 1])],
    attrs: { format: 'q5k' },
    error: 'shape',
    argument: 'packed',
  }),
  invalid(k.quantizedMatmul, {
    label: 'q5k without dmin offsets',
    inputs: [f32([2, 256]), ...weightOf('q5k', 5, 256, false)],
    attrs: { format: 'q5k' },
    error: 'shape',
    argument: 'offsets',
  }),
  invalid(k.quantizedMatmul, {
    label: 'q6k with K of 300, not whole super-blocks',
    inputs: [f32([2, 300]), ...weightOf('q6k', 5, 300, false)],
    attrs: { format: 'q6k' },
    error: 'shape',
    argument: 'x',
  }),
  invalid(k.quantizedMatmul, {
    label: "q6k without its int8 sub-block scales in 'zeros'",
    inputs: [f32([2, 256]), quantWords([5, 48]), f32([5, 1])],
    attrs: { format: 'q6k' },
    error: 'shape',
    argument: 'zeros',
  }),
  invalid(k.quantizedMatmul, {
    label: "q6k's 'zeros' of q4k's three words per super-block",
    inputs: [f32([2, 256]), quantWords([5, 48]), f32([5, 1]), quantWords([5, 3])],
    attrs: { format: 'q6k' },
    error: 'shape',
    argument: 'zeros',
  }),
  invalid(k.quantizedMatmul, {
    label: "q6k's 'packed' of q4k's 32 words per super-block",
    inputs: [f32([2, 256]), quantWords([5, 32]), f32([5, 1]), quantWords([5, 4])],
    attrs: { format: 'q6k' },
    error: 'shape',
    argument: 'packed',
  }),
  invalid(k.quantizedMatmul, {
    label: 'q6k with offsets',
    inputs: [f32([2, 256]), ...weightOf('q6k', 5, 256, false), undefined, f32([5, 1])],
    attrs: { format: 'q6k' },
    error: 'shape',
    argument: 'offsets',
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

// ---- quantizedEmbedding: every value the format's f32 ------------------------------------

/**
 * The reference's values, but for one rounding: a shader compiler may fuse
 * q4g32a's q · scale − offset into one fma (WGSL allows it), which skips the
 * rounding of the product, at most half an ulp of |q · scale| <= about 1.
 */
const GATHER_TOLERANCE: Tolerance = { rtol: 2 ** -22, atol: 2 ** -24 };
/** The same values rounded to a half dtype: a fused fma's value can round to the neighbouring half. */
const HALF_GATHER_TOLERANCE: Tolerance = { rtol: 2 ** -8, atol: 2 ** -24 };

/** Ids in [0, v), every third one outside it (just outside, negative, the i32 extremes). */
function someBadIds(shape: readonly number[], v: number): InputSample {
  const bad = [v, -1, 2147483647, -2147483648, 536870912];
  return {
    shape,
    dtype: 'i32',
    init: (rng, size) =>
      Array.from({ length: size }, (_, i) =>
        i % 3 === 2 ? bad[((i - 2) / 3) % bad.length]! : rng.int(0, v),
      ),
  };
}

function tableOf(format: QuantFormat, v: number, d: number, zeroPoints: boolean) {
  const [packed, scales, zeros] = weightOf(format, v, d, zeroPoints);
  const offsets = offsetsOf(format, v, d);
  const inputs = [packed, scales, zeros, offsets];
  while (inputs.length > 0 && inputs[inputs.length - 1] === undefined) inputs.pop();
  return inputs;
}

// ids shape, V, D: D inside one block, across groups and odd, long.
const TABLES = [
  [[1], 1, 1],
  [[7], 13, 61],
  [[3, 5], 67, 33],
  [[2, 3], 5, 257],
  [[300], 1031, 17],
] as const;

for (const format of QUANT_FORMATS) {
  const zeroPoints = quantLayout(format, 1).zeroPoints;
  const depth = (kd: number) => depthFor(format, kd);
  for (const [ids, v, kd] of TABLES) {
    const d = depth(kd);
    cases.push(
      valid(k.quantizedEmbedding, {
        label: `${format} [${v}, ${d}] by ids [${ids.join(', ')}]`,
        inputs: [{ shape: ids, dtype: 'i32', init: { int: [0, v] } }, ...tableOf(format, v, d, false)],
        attrs: { format, dim: d },
        tolerance: GATHER_TOLERANCE,
      }),
    );
  }
  cases.push(
    valid(k.quantizedEmbedding, {
      label: `${format} [13, ${depth(40)}] by out-of-range ids: NaN rows${zeroPoints ? ', zero points' : ''}`,
      inputs: [someBadIds([4, 3], 13), ...tableOf(format, 13, depth(40), zeroPoints)],
      attrs: { format, dim: depth(40) },
      tolerance: GATHER_TOLERANCE,
    }),
  );
  // A half y (a weight dequantized for a tensor-core product): odd element
  // counts, so a word of two halves ends the tensor, and NaN rows.
  for (const [to, ids, v, kd] of [
    ['f16', [3, 5], 67, 33],
    ['bf16', [7], 13, 61],
  ] as const) {
    const d = depth(kd);
    cases.push(
      valid(k.quantizedEmbedding, {
        label: `${format} [${v}, ${d}] by ids [${ids.join(', ')}] to ${to}`,
        inputs: [{ shape: ids, dtype: 'i32', init: { int: [0, v] } }, ...tableOf(format, v, d, false)],
        attrs: { format, dim: d, to },
        tolerance: HALF_GATHER_TOLERANCE,
      }),
    );
  }
  cases.push(
    valid(k.quantizedEmbedding, {
      label: `${format} [13, ${depth(40)}] by out-of-range ids to bf16: NaN rows`,
      inputs: [someBadIds([5, 3], 13), ...tableOf(format, 13, depth(40), zeroPoints)],
      attrs: { format, dim: depth(40), to: 'bf16' },
      tolerance: HALF_GATHER_TOLERANCE,
    }),
  );
}

const [tableWords, tableScales] = weightOf('q4g32', 5, 40, false);
errors.push(
  invalid(k.quantizedEmbedding, {
    label: "'packed' of another D",
    inputs: [i32([3], 0, 5), tableWords, tableScales],
    attrs: { format: 'q4g32', dim: 80 },
    error: 'shape',
    argument: 'packed',
  }),
  invalid(k.quantizedEmbedding, {
    label: "'ids' as f32",
    inputs: [{ shape: [3], dtype: 'f32' }, tableWords, tableScales],
    attrs: { format: 'q4g32', dim: 40 },
    error: 'dtype',
    argument: 'ids',
  }),
  invalid(k.quantizedEmbedding, {
    label: 'q4g32a without offsets',
    inputs: [i32([3], 0, 5), tableWords, tableScales],
    attrs: { format: 'q4g32a', dim: 40 },
    error: 'shape',
    argument: 'offsets',
  }),
  invalid(k.quantizedEmbedding, {
    label: "'scales' of one per row under q8g16",
    inputs: [i32([3], 0, 5), ...weightOf('q8', 5, 40, false).slice(0, 2)],
    attrs: { format: 'q8g16', dim: 40 },
    error: 'shape',
    argument: 'scales',
  }),
  invalid(k.quantizedEmbedding, {
    label: 'q4k with D of 40, not whole super-blocks',
    inputs: [i32([3], 0, 5), ...weightOf('q4k', 5, 40, false), f32([5, 1])],
    attrs: { format: 'q4k', dim: 40 },
    error: 'argument',
    argument: 'attrs.dim',
  }),
  invalid(k.quantizedEmbedding, {
    label: 'q5k with D of 40, not whole super-blocks',
    inputs: [i32([3], 0, 5), ...weightOf('q5k', 5, 40, false), f32([5, 1])],
    attrs: { format: 'q5k', dim: 40 },
    error: 'argument',
    argument: 'attrs.dim',
  }),
  invalid(k.quantizedEmbedding, {
    label: 'q6k with D of 40, not whole super-blocks',
    inputs: [i32([3], 0, 5), ...weightOf('q6k', 5, 40, false)],
    attrs: { format: 'q6k', dim: 40 },
    error: 'argument',
    argument: 'attrs.dim',
  }),
  invalid(k.quantizedEmbedding, {
    label: 'dim missing',
    inputs: [i32([3], 0, 5), tableWords, tableScales],
    attrs: { format: 'q4g32' },
    error: 'argument',
    argument: 'attrs.dim',
  }),
);

export const quantizedCases: FamilyCases = { cases, errors };
