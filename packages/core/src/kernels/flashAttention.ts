import { roundedToHalf } from '../dtype.js';
import type { InputMetas, TensorMeta } from '../kernel.js';
import { defineKernel } from '../kernel.js';
import { ArgCheck } from './check.js';
import { bytesOf, F32 } from './vocabulary.js';

// Causal self-attention for training: every query attends to the keys of its
// own batch item up to its own position, and the forward keeps the per-row
// log-sum-exp so that the backward recomputes the probabilities tile by tile
// (FlashAttention-2) instead of reading a [T, T] score matrix. Tensors are
// sequence-first, [T, B, heads, headDim]: the layout of a linear layer's
// output [T·B, heads·headDim], so training needs no transpose.

/**
 * How the products are computed: `'f32'` (the default) exactly; `'half'`
 * rounds q, k, v (and the backward's dOut) to bf16 and sums their products
 * in f32, as matmul's precision 'half' does: tensor cores in mixed-precision
 * training. A backend may also round the probabilities and their gradients
 * to bf16 before the second products (the reference does not: which
 * running max they are rounded against is the kernel's); the softmax, lse
 * and D = rowsum(dOut ∘ out) stay f32. A backend without half products
 * computes in f32, more precisely than asked.
 */
export const FLASH_PRECISIONS = ['f32', 'half'] as const;
export type FlashPrecision = (typeof FLASH_PRECISIONS)[number];

type FlashAttrs = { scale: number; precision: FlashPrecision };

const FAMILY = 'flashAttention';

const flashAttrs = {
  scale: { kind: 'number', default: 0, min: 0, finite: true, doc: 'score scale; 0 means 1/sqrt(headDim)' },
  precision: {
    kind: 'enum',
    values: FLASH_PRECISIONS,
    default: 'f32',
    doc: "'f32' exact products (default); 'half' rounds q, k, v and dOut to bf16 for the products, summed in f32 (softmax, lse and D stay f32)",
  },
} as const;

/** q, k and v, the inputs of the forward and the first three of the backward. */
const QKV_INPUTS = [
  { name: 'q', dtypes: F32, doc: '[T, B, nHeads, headDim]' },
  { name: 'k', dtypes: F32, doc: '[T, B, nKvHeads, headDim]; nKvHeads divides nHeads' },
  { name: 'v', dtypes: F32, doc: "[T, B, nKvHeads, headDim], the shape of 'k'" },
] as const;

/** The operands as precision `precision` multiplies them: under 'half', rounded to bf16. */
function productOperands<T extends readonly ArrayLike<number>[]>(precision: FlashPrecision, operands: T): T {
  return precision === 'half' ? (operands.map((x) => roundedToHalf('bf16', x)) as unknown as T) : operands;
}

export interface FlashDims {
  readonly tokens: number;
  readonly batch: number;
  readonly nHeads: number;
  readonly nKvHeads: number;
  readonly headDim: number;
}

/** The dimensions of q [T, B, nHeads, headDim] and k, v [T, B, nKvHeads, headDim]. */
export function flashDims(q: TensorMeta, k: TensorMeta): FlashDims {
  const [tokens, batch, nHeads, headDim] = q.shape as [number, number, number, number];
  return { tokens, batch, nHeads, nKvHeads: k.shape[2]!, headDim };
}

/** The score scale an attribute value of 0 stands for. */
export function flashScale(scale: number, headDim: number): number {
  return scale === 0 ? 1 / Math.sqrt(headDim) : scale;
}

function checkQkv(check: ArgCheck, [q, k, v]: InputMetas): FlashDims {
  check.rank('q', q!, 4, '[T, B, nHeads, headDim]');
  check.rank('k', k!, 4, '[T, B, nKvHeads, headDim]');
  const [tokens, batch, nHeads, headDim] = q!.shape as [number, number, number, number];
  check.dim('k', k!, 0, tokens, "T of 'q'");
  check.dim('k', k!, 1, batch, "B of 'q'");
  check.dim('k', k!, 3, headDim, "headDim of 'q'");
  const nKvHeads = check.kvHeads('k', k!, 2, 'nKvHeads', nHeads);
  check.sameShape('v', v!, k!.shape, "'k'");
  return { tokens, batch, nHeads, nKvHeads, headDim };
}

/** Scores a causal pass computes: query t of each (batch, head) sees t + 1 keys. */
function causalScores(d: FlashDims): number {
  return (d.batch * d.nHeads * d.tokens * (d.tokens + 1)) / 2;
}

/** Calls `each(qAt, kvAt, t, row)` for every (token, batch, head): element offsets of its q row and of its kv head at token 0, and its lse index. */
function forEachRow(d: FlashDims, each: (qAt: number, kvAt: number, t: number, row: number) => void): void {
  const group = d.nHeads / d.nKvHeads;
  for (let t = 0; t < d.tokens; t++) {
    for (let b = 0; b < d.batch; b++) {
      for (let h = 0; h < d.nHeads; h++) {
        const row = (t * d.batch + b) * d.nHeads + h;
        each(row * d.headDim, (b * d.nKvHeads + Math.floor(h / group)) * d.headDim, t, row);
      }
    }
  }
}

/** f64 dot product of q's row at `qAt` with key `j` of the kv head at `kvAt`. */
function dotKey(
  q: ArrayLike<number>,
  qAt: number,
  k: ArrayLike<number>,
  kvAt: number,
  j: number,
  kvStride: number,
  hd: number,
): number {
  let dot = 0;
  const at = kvAt + j * kvStride;
  for (let d = 0; d < hd; d++) dot += q[qAt + d]! * k[at + d]!;
  return dot;
}

export const flashAttention = defineKernel<FlashAttrs>({
  name: 'flashAttention',
  family: FAMILY,
  summary:
    'out[t, b, h] = softmax(scale · q[t, b, h] · k[0 … t, b, g]ᵀ) · v[0 … t, b, g], g = kv head of h; lse = the log of the softmax denominator (with the max)',
  inputs: QKV_INPUTS,
  attributes: flashAttrs,
  infer(inputs) {
    const { tokens, batch, nHeads } = checkQkv(new ArgCheck('flashAttention'), inputs);
    return [
      { name: 'out', shape: inputs[0]!.shape, dtype: inputs[0]!.dtype },
      { name: 'lse', shape: [tokens, batch, nHeads], dtype: 'f32' },
    ];
  },
  reference(inputs, attrs, io) {
    const [q, k, v] = productOperands(attrs.precision, [inputs[0]!, inputs[1]!, inputs[2]!]);
    const d = flashDims(io.inputs[0]!, io.inputs[1]!);
    const hd = d.headDim;
    const scale = flashScale(attrs.scale, hd);
    const kvStride = d.batch * d.nKvHeads * hd;
    const out = new Float32Array(q!.length);
    const lse = new Float32Array(d.tokens * d.batch * d.nHeads);
    const s = new Float64Array(d.tokens);
    const acc = new Float64Array(hd);
    forEachRow(d, (qAt, kvAt, t, row) => {
      let max = Number.NEGATIVE_INFINITY;
      for (let j = 0; j <= t; j++) {
        s[j] = scale * dotKey(q!, qAt, k!, kvAt, j, kvStride, hd);
        max = Math.max(max, s[j]!);
      }
      let sum = 0;
      acc.fill(0);
      for (let j = 0; j <= t; j++) {
        const w = Math.exp(s[j]! - max);
        sum += w;
        for (let x = 0; x < hd; x++) acc[x]! += w * v![kvAt + j * kvStride + x]!;
      }
      for (let x = 0; x < hd; x++) out[qAt + x] = acc[x]! / sum;
      lse[row] = max + Math.log(sum);
    });
    return [out, lse];
  },
  cost([q, k, v]) {
    const d = flashDims(q!, k!);
    return {
      // q·k and the weighted sum of v (2 flops per multiply-add each), plus max, exp and sum per score.
      flops: causalScores(d) * (4 * d.headDim + 3),
      bytes: 2 * bytesOf(q) + bytesOf(k) + bytesOf(v) + 4 * d.tokens * d.batch * d.nHeads,
    };
  },
});

export const flashAttentionBackward = defineKernel<FlashAttrs>({
  name: 'flashAttentionBackward',
  family: FAMILY,
  summary:
    "dq, dk and dv of flashAttention from its inputs, out, lse and dOut: P = exp(scale · q·kᵀ − lse) recomputed, dS = P ∘ (dOut·vᵀ − rowsum(dOut ∘ out)); dk and dv summed over each kv head's query heads",
  inputs: [
    ...QKV_INPUTS,
    { name: 'out', dtypes: F32, doc: "flashAttention's out, the shape of 'q'" },
    { name: 'dOut', dtypes: F32, doc: "the gradient of 'out'" },
    { name: 'lse', dtypes: F32, doc: "[T, B, nHeads]: flashAttention's lse" },
  ],
  attributes: flashAttrs,
  infer(inputs) {
    const check = new ArgCheck('flashAttentionBackward');
    const { tokens, batch, nHeads } = checkQkv(check, inputs);
    const [q, k, v, out, dOut, lse] = inputs;
    check.sameShape('out', out!, q!.shape, "'q'");
    check.sameShape('dOut', dOut!, q!.shape, "'q'");
    check.sameShape('lse', lse!, [tokens, batch, nHeads], "[T, B, nHeads] of 'q'");
    return [
      { name: 'dq', shape: q!.shape, dtype: q!.dtype },
      { name: 'dk', shape: k!.shape, dtype: k!.dtype },
      { name: 'dv', shape: v!.shape, dtype: v!.dtype },
    ];
  },
  reference([q0, k0, v0, out, dOut0, lse], attrs, io) {
    const [q, k, v, dOut] = productOperands(attrs.precision, [q0!, k0!, v0!, dOut0!]);
    const d = flashDims(io.inputs[0]!, io.inputs[1]!);
    const hd = d.headDim;
    const scale = flashScale(attrs.scale, hd);
    const kvStride = d.batch * d.nKvHeads * hd;
    const dq = new Float32Array(q!.length);
    const dk = new Float64Array(k!.length);
    const dv = new Float64Array(v!.length);
    const dqRow = new Float64Array(hd);
    forEachRow(d, (qAt, kvAt, t, row) => {
      let delta = 0;
      for (let x = 0; x < hd; x++) delta += dOut0![qAt + x]! * out![qAt + x]!;
      dqRow.fill(0);
      for (let j = 0; j <= t; j++) {
        const at = kvAt + j * kvStride;
        const p = Math.exp(scale * dotKey(q!, qAt, k!, kvAt, j, kvStride, hd) - lse![row]!);
        const dp = dotKey(dOut!, qAt, v!, kvAt, j, kvStride, hd);
        const ds = scale * p * (dp - delta);
        for (let x = 0; x < hd; x++) {
          dv[at + x]! += p * dOut![qAt + x]!;
          dk[at + x]! += ds * q![qAt + x]!;
          dqRow[x]! += ds * k![at + x]!;
        }
      }
      for (let x = 0; x < hd; x++) dq[qAt + x] = dqRow[x]!;
    });
    return [dq, Float32Array.from(dk), Float32Array.from(dv)];
  },
  cost([q, k, v]) {
    const d = flashDims(q!, k!);
    return {
      // Five products a score (q·k again, dO·v, dv, dq, dk), 2 flops per multiply-add, and the exp and dS.
      flops: causalScores(d) * (10 * d.headDim + 4),
      bytes: 4 * bytesOf(q) + 3 * (bytesOf(k) + bytesOf(v)) + 4 * d.tokens * d.batch * d.nHeads,
    };
  },
});
