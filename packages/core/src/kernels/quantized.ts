import { bytesPerElement } from '../dtype.js';
import { defineKernel, type TensorMeta } from '../kernel.js';
import { Q4K_SUPER_BLOCK, QUANT_FORMATS, type QuantFormat, quantLayout } from '../quant/layout.js';
import { dequantizeInto } from '../quant/quantize.js';
import { sizeOf } from '../shape.js';
import { ArgCheck } from './check.js';
import {
  ACTIVATIONS_ATTR,
  checkNormWeight,
  NORM_WEIGHT_INPUT,
  normedRows,
  OPTIONAL_NORM_EPS,
  type QuantActivations,
} from './foldedNorm.js';
import { bytesOf, FLOAT } from './vocabulary.js';

export {
  QGEMV_ACTIVATION_CHOICES,
  type QgemvActivations,
  QUANT_ACTIVATIONS,
  type QuantActivations,
  takesInt8Activations,
} from './foldedNorm.js';

const FAMILY = 'quantized';

/**
 * The dtype group of quantized weights' scales: f32, f16 or bf16 whatever
 * the activations are.
 */
export const SCALES = 'scale';

type QuantizedMatmulAttrs = { format: QuantFormat; beta: number; eps: number; activations: QuantActivations };

/** The codes, scales and zero points of a quantized matrix of `rows` rows of `depth` weights. */
function packedInputs(rows: string, depth: string) {
  return [
    { name: 'packed', dtypes: ['u32'], doc: `[${rows}, rowWords(${depth})]: the codes, see quantLayout` },
    { name: 'scales', dtypes: FLOAT, dtypeGroup: SCALES, doc: `[${rows}, groups(${depth})]` },
    {
      name: 'zeros',
      dtypes: ['u32'],
      optional: true,
      doc: `[${rows}, zeroWords]: q4g32/q4g128 zero-point nibbles (absent, codes are centred on 8), q4k's and q5k's 6-bit sub-block scales and mins or q6k's int8 sub-block scales (required there)`,
    },
  ] as const;
}

/**
 * y = x · dequant(W)ᵀ (+ beta · c) for a weight W [N, K] in a quantized
 * format (see quant/layout.ts for the bits): the decode product of a linear
 * layer whose weights are read as 8 or 4 bits. x, c and y share one float
 * dtype; the sums are f32. The reference dequantizes exactly (in f64; ggml's
 * f32 values for the formats after q4g128) and sums in f64, so a backend
 * differs only by its f32 summation order (and, for those formats, by where
 * it rounds the scaling: a kernel may scale a group's sum instead of each
 * weight). Optional inputs keep their positions: offsets come after c.
 * With `normWeight`, x̂ = rmsNorm(x, normWeight, eps) replaces x, folded into
 * the product (see foldedNorm.ts): the norm before a decoder's projections.
 * `activations: 'int8'` lets a backend take x̂ as int8 blocks (see
 * ACTIVATIONS_ATTR); the reference is exact either way.
 */
export const quantizedMatmul = defineKernel<QuantizedMatmulAttrs>({
  name: 'quantizedMatmul',
  family: FAMILY,
  summary: 'y = x · dequant(W)ᵀ + beta · c for an int8 or 4-bit weight W [N, K] (scale per row or group)',
  inputs: [
    { name: 'x', dtypes: FLOAT, doc: '[M, K]: M rows (1 when decoding)' },
    ...packedInputs('N', 'K'),
    { name: 'c', dtypes: FLOAT, optional: true, doc: '[M, N], added after scaling by beta' },
    {
      name: 'offsets',
      dtypes: FLOAT,
      dtypeGroup: SCALES,
      optional: true,
      doc: "[N, groups(K)]: q4g32a's, q8g32a's, q5g32a's, q4k's and q5k's offsets (q4k, q5k: dmin), subtracted after scaling (required there, refused elsewhere)",
    },
    NORM_WEIGHT_INPUT,
  ],
  attributes: {
    format: { kind: 'enum', values: QUANT_FORMATS, doc: 'how W is stored' },
    beta: { kind: 'number', default: 1, doc: "scales 'c' (unused without it)" },
    eps: OPTIONAL_NORM_EPS,
    activations: ACTIVATIONS_ATTR,
  },
  infer([x, packed, scales, zeros, c, offsets, normWeight], { format }) {
    const check = new ArgCheck('quantizedMatmul');
    check.rank('x', x!, 2, '[M, K]');
    const [m, k] = x!.shape as [number, number];
    check.shape(k > 0, 'x', 'a quantized product needs rows of at least one element', 'K >= 1', x!.shape);
    check.shape(
      wholeSuperBlocks(format, k),
      'x',
      `${format} rows are whole super-blocks`,
      `K ${superBlockMultiple(format)}`,
      `K = ${k}`,
    );
    const n = checkQuantizedTable(
      check,
      format,
      k,
      { packed: packed!, scales: scales!, zeros, offsets },
      { rows: 'N', rowOf: `K = ${k}`, forRows: `K = ${k}` },
    );
    if (c) check.sameShape('c', c, [m, n], 'the product [M, N]');
    if (normWeight) checkNormWeight(check, x!, normWeight);
    return [{ name: 'y', shape: [m, n], dtype: x!.dtype }];
  },
  reference([xIn, packed, scales, zeros, c, offsets, normWeight], { format, beta, eps }, io) {
    const [m, k] = io.inputs[0]!.shape as [number, number];
    const n = io.outputs[0]!.shape[1]!;
    const x = normedRows(xIn!, normWeight, eps, m, k);
    const w = new Float64Array(n * k);
    dequantizeInto(w, packed!, scales!, zeros, quantLayout(format, k), n, k, offsets);
    const y = new Float32Array(m * n);
    for (let i = 0; i < m; i++) {
      for (let j = 0; j < n; j++) {
        let sum = 0;
        for (let p = 0; p < k; p++) sum += x[i * k + p]! * w[j * k + p]!;
        y[i * n + j] = sum + (c ? beta * c[i * n + j]! : 0);
      }
    }
    return [y];
  },
  cost([x, packed, scales, zeros, c, offsets, normWeight]) {
    const [m, k] = x!.shape as [number, number];
    const n = packed!.shape[0]!;
    return {
      flops: 2 * m * n * k + (c ? 2 * m * n : 0) + (normWeight ? 3 * m * k : 0),
      bytes:
        bytesOf(x) +
        bytesOf(normWeight) +
        bytesOf(packed) +
        bytesOf(scales) +
        bytesOf(zeros) +
        bytesOf(c) +
        bytesOf(offsets) +
        bytesOf({ shape: [m, n], dtype: x!.dtype }),
    };
  },
});

type QuantizedEmbeddingAttrs = { format: QuantFormat; dim: number; to: (typeof FLOAT)[number] };

/** Whether rows of `length` suit `format`: q4k's, q5k's and q6k's are whole super-blocks of 256 (as GGUF's K-quant rows are). */
function wholeSuperBlocks(format: QuantFormat, length: number): boolean {
  return !quantLayout(format, 1).subBlockScales || length % Q4K_SUPER_BLOCK === 0;
}

const superBlockMultiple = (format: QuantFormat) =>
  `a multiple of ${Q4K_SUPER_BLOCK} (whole ${format} super-blocks)`;

/**
 * The shape checks of a quantized table [V, D] (or weight [N, K]) in
 * `format`; returns V. `words` names the rows and the row length in the
 * messages (default: a table's V and D).
 */
function checkQuantizedTable(
  check: ArgCheck,
  format: QuantFormat,
  dim: number,
  metas: {
    packed: TensorMeta;
    scales: TensorMeta;
    zeros: TensorMeta | undefined;
    offsets: TensorMeta | undefined;
  },
  words: { rows: string; rowOf: string; forRows: string } = {
    rows: 'V',
    rowOf: `${dim}`,
    forRows: `rows of ${dim}`,
  },
): number {
  const { rows, rowOf, forRows } = words;
  const layout = quantLayout(format, dim);
  const { packed, scales, zeros, offsets } = metas;
  check.rank('packed', packed, 2, `[${rows}, rowWords]`);
  const v = packed.shape[0]!;
  check.dim('packed', packed, 1, layout.rowWords, `the u32 words of a ${format} row of ${rowOf}`);
  check.sameShape('scales', scales, [v, layout.groups], `[${rows}, groups] of ${format} for ${forRows}`);
  if (layout.subBlockScales) {
    const [words, what] = format === 'q6k' ? [4, 'int8 scales'] : [3, '6-bit scales and mins'];
    check.shape(
      zeros !== undefined,
      'zeros',
      `${format} needs its sub-block ${what}`,
      `[${rows}, ${words} · groups] = [${v}, ${layout.zeroWords}]`,
      'absent',
    );
    check.sameShape('zeros', zeros!, [v, layout.zeroWords], `[${rows}, ${words} · groups] words of ${what}`);
  } else if (zeros) {
    check.shape(
      layout.zeroPoints,
      'zeros',
      `${format} takes no zero points`,
      `nothing with ${format} (zero points are q4g32's and q4g128's)`,
      zeros.shape,
    );
    check.sameShape('zeros', zeros, [v, layout.zeroWords], `[${rows}, ceil(groups / 8)] nibble words`);
  }
  if (layout.offsets || offsets) {
    check.shape(
      layout.offsets && offsets !== undefined,
      'offsets',
      layout.offsets ? `${format} needs an offset per group` : `${format} takes no offsets`,
      layout.offsets ? `[${rows}, groups] = [${v}, ${layout.groups}]` : 'nothing',
      offsets?.shape ?? 'absent',
    );
    check.sameShape('offsets', offsets!, [v, layout.groups], `[${rows}, groups] of ${format} for ${forRows}`);
  }
  return v;
}

/**
 * y[..., :] = dequant(table)[ids[...], :] for a table [V, D] in a quantized
 * format: the embedding lookup of a quantized token table (a GGUF file's
 * Q4_K, Q5_K or Q6_K `token_embd`), dequantizing only the rows it reads. D is an
 * attribute: a row's packed words do not give it (rows are padded). y is f32
 * whatever the scales' dtype (or `to`'s half dtype, each f32 value rounded:
 * a weight dequantized for a tensor-core product), each value what the
 * format's dequantization gives (see quant/layout.ts): a backend matches
 * the reference bit for bit,
 * but that a shader compiler may fuse q4g32a's q · scale − offset into one
 * fma. An id outside [0, V) gives a NaN row, as `embedding`'s does.
 */
export const quantizedEmbedding = defineKernel<QuantizedEmbeddingAttrs>({
  name: 'quantizedEmbedding',
  family: FAMILY,
  summary:
    'y[..., :] = dequant(table)[ids[...], :] for an int8 or 4-bit table [V, D]; NaN rows for ids outside',
  inputs: [
    { name: 'ids', dtypes: ['i32'], doc: 'any shape of rank >= 1, row ids in [0, V)' },
    ...packedInputs('V', 'D'),
    {
      name: 'offsets',
      dtypes: FLOAT,
      dtypeGroup: SCALES,
      optional: true,
      doc: "[V, groups(D)]: q4g32a's, q8g32a's, q5g32a's, q4k's and q5k's offsets (required there, refused elsewhere)",
    },
  ],
  attributes: {
    format: { kind: 'enum', values: QUANT_FORMATS, doc: 'how the table is stored' },
    dim: { kind: 'number', integer: true, min: 1, doc: 'D, the length of a row' },
    to: {
      kind: 'enum',
      values: FLOAT,
      default: 'f32',
      doc: "y's dtype: the dequantized f32 values rounded to nearest even (a half weight for a tensor-core product)",
    },
  },
  infer([ids, packed, scales, zeros, offsets], { format, dim, to }) {
    const check = new ArgCheck('quantizedEmbedding');
    check.minRank('ids', ids!, 1);
    check.attr(
      wholeSuperBlocks(format, dim),
      'dim',
      `${format} rows are whole super-blocks`,
      `D ${superBlockMultiple(format)}`,
      dim,
    );
    checkQuantizedTable(check, format, dim, { packed: packed!, scales: scales!, zeros, offsets });
    return [{ name: 'y', shape: [...ids!.shape, dim], dtype: to }];
  },
  reference([ids, packed, scales, zeros, offsets], { format, dim }, io) {
    const v = io.inputs[1]!.shape[0]!;
    const layout = quantLayout(format, dim);
    const y = new Float32Array(ids!.length * dim);
    const row = new Float64Array(dim);
    for (let i = 0; i < ids!.length; i++) {
      const id = ids![i]!;
      if (!(id >= 0 && id < v)) {
        y.fill(Number.NaN, i * dim, (i + 1) * dim);
        continue;
      }
      dequantizeInto(row, packed!, scales!, zeros, layout, 1, dim, offsets, id);
      y.set(row, i * dim);
    }
    return [y];
  },
  cost([ids, packed, scales, zeros, offsets], { format, dim, to }) {
    const n = sizeOf(ids!.shape);
    const layout = quantLayout(format, dim);
    const v = packed!.shape[0]!;
    // A gather: the ids, one packed row (and its scales) per id, the rows written in y's dtype.
    const perRow = (b: { shape: readonly number[] } | undefined, bytes: number) =>
      b ? (sizeOf(b.shape) / Math.max(v, 1)) * bytes : 0;
    const scaleBytes = bytesPerElement(scales!.dtype);
    return {
      flops: n * dim * (layout.offsets ? 2 : 1),
      bytes:
        4 * n +
        n *
          (perRow(packed, 4) +
            perRow(scales, scaleBytes) +
            perRow(zeros, 4) +
            perRow(offsets, scaleBytes) +
            bytesPerElement(to) * dim),
    };
  },
});
