import { bytesPerElement } from '../dtype.js';
import { defineKernel } from '../kernel.js';
import { attendRows } from './attentionReference.js';
import { ArgCheck } from './check.js';
import { checkKvCaches } from './kvCacheChecks.js';
import { bytesOf, CACHES, FLOAT, type OutDType, outDtypeAttr, outDtypeOf } from './vocabulary.js';

// Prompt processing: a chunk of T queries attends causally over the KV cache,
// into which the chunk's own keys and values were written first. One kernel
// for the first chunk and for later ones; backends tile it the
// FlashAttention way (online softmax, no [T, S] score matrix in memory).
// Precision: over half caches a backend may round q and the softmax weights P to the caches' dtype for tensor-core products (f32 accumulation, max and sum).

type CausalAttentionAttrs = { position: number; scale: number; out: OutDType };

export const causalAttention = defineKernel<CausalAttentionAttrs>({
  name: 'causalAttention',
  family: 'decoding',
  summary:
    'out[t, h] = softmax(scale · q[t, h] · K[g, 0 … position + t]ᵀ) · V[g, 0 … position + t], g = kv head of h',
  inputs: [
    {
      name: 'q',
      dtypes: FLOAT,
      doc: '[T, nHeads, headDim]: the chunk of queries at cache rows position … position + T − 1',
    },
    {
      name: 'kCache',
      dtypes: FLOAT,
      dtypeGroup: CACHES,
      doc: "[nKvHeads, maxSeq, headDim], head-first, holding the chunk's own keys at its rows; nKvHeads divides nHeads; may be half under f32 'q'",
    },
    {
      name: 'vCache',
      dtypes: FLOAT,
      dtypeGroup: CACHES,
      doc: "[nKvHeads, maxSeq, headDim], the type of 'kCache'",
    },
  ],
  attributes: {
    position: {
      kind: 'number',
      integer: true,
      min: 0,
      doc: "cache row of the chunk's first query; query t attends to rows 0 … position + t, later rows are ignored",
    },
    scale: { kind: 'number', default: 0, min: 0, finite: true, doc: 'score scale; 0 means 1/sqrt(headDim)' },
    out: outDtypeAttr("is q's"),
  },
  infer([q, kCache, vCache], { position, out }) {
    const check = new ArgCheck('causalAttention');
    check.rank('q', q!, 3, '[T, nHeads, headDim]');
    const [tokens, nHeads, headDim] = q!.shape as [number, number, number];
    const maxSeq = checkKvCaches(check, nHeads, headDim, kCache!, vCache!);
    check.attr(
      position + tokens <= maxSeq,
      'position',
      `the chunk's ${tokens} row(s) must lie in the cache of ${maxSeq} rows`,
      `<= maxSeq − T = ${maxSeq - tokens}`,
      position,
    );
    return [{ name: 'out', shape: q!.shape, dtype: outDtypeOf(out, q!.dtype) }];
  },
  reference([q, kCache, vCache], attrs, io) {
    const [tokens, nHeads, headDim] = io.outputs[0]!.shape as [number, number, number];
    const [nKvHeads, maxSeq] = io.inputs[1]!.shape as [number, number, number];
    const { position } = attrs;
    const group = nHeads / nKvHeads;
    const scale = attrs.scale === 0 ? 1 / Math.sqrt(headDim) : attrs.scale;
    const out = new Float32Array(tokens * nHeads * headDim);
    const weights = new Float64Array(position + tokens);
    const acc = new Float64Array(headDim);
    for (let t = 0; t < tokens; t++) {
      const rows = position + t + 1;
      for (let h = 0; h < nHeads; h++) {
        const kv = Math.floor(h / group) * maxSeq * headDim;
        attendRows(
          q!,
          (t * nHeads + h) * headDim,
          kCache!,
          vCache!,
          kv,
          rows,
          headDim,
          scale,
          out,
          weights,
          acc,
        );
      }
    }
    return [out];
  },
  cost([q, kCache], attrs) {
    const [tokens, nHeads, headDim] = q!.shape as [number, number, number];
    const nKvHeads = kCache!.shape[0]!;
    // Query t attends to position + t + 1 rows: the sum over the chunk.
    const scores = tokens * attrs.position + (tokens * (tokens + 1)) / 2;
    const rows = attrs.position + tokens;
    return {
      // q·k and the weighted sum of v (2 flops per multiply-add each), plus max, exp and sum per score.
      flops: nHeads * scores * (4 * headDim + 3),
      bytes:
        bytesOf(q) +
        bytesOf({ shape: q!.shape, dtype: outDtypeOf(attrs.out, q!.dtype) }) +
        2 * bytesPerElement(kCache!.dtype) * nKvHeads * rows * headDim,
    };
  },
});
