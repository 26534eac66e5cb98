import { bytesPerElement, type HostArray } from '../dtype.js';
import { defineKernel, deviceAttribute, runReference, type TensorMeta } from '../kernel.js';
import { formatShape, type Shape, shapesEqual, sizeOf } from '../shape.js';
import { attendRows } from './attentionReference.js';
import { ArgCheck } from './check.js';
import { checkFusedQkv, splitFused } from './fusedQkv.js';
import { checkKvCaches } from './kvCacheChecks.js';
import { rope } from './rope.js';
import { checkFrequencies, FREQUENCIES_INPUT } from './ropeFrequencies.js';
import { bytesOf, CACHES, FLOAT } from './vocabulary.js';

const FAMILY = 'decoding';

/**
 * The T rows written at `position` fit a cache of maxSeq rows. With the
 * position on the device (`positionTensor` given) only the rows' count can
 * be checked here, on the rows' argument (`always`: checked there with a
 * host position too).
 */
function checkRowsFit(
  check: ArgCheck,
  rows: { argument: string; shape: Shape; always: boolean },
  at: { tokens: number; maxSeq: number; position: number; positionTensor: TensorMeta | undefined },
): void {
  const { tokens, maxSeq, position } = at;
  const onDevice = at.positionTensor !== undefined;
  const message = `the ${tokens} written row(s) must fit in the cache of ${maxSeq} rows`;
  check.shape(
    !(rows.always || onDevice) || tokens <= maxSeq,
    rows.argument,
    message,
    `at most ${maxSeq} rows`,
    rows.shape,
  );
  check.attr(
    onDevice || position + tokens <= maxSeq,
    'position',
    message,
    `<= maxSeq − T = ${maxSeq - tokens}`,
    position,
  );
}

// ---- KV cache scatter ------------------------------------------------------

type KvCacheScatterAttrs = { position: number };

export const kvCacheScatter = defineKernel<KvCacheScatterAttrs>({
  name: 'kvCacheScatter',
  family: FAMILY,
  summary: 'cache[h, position + t, :] = values[t, h·headDim : (h+1)·headDim], in place',
  inputs: [
    {
      name: 'cache',
      dtypes: FLOAT,
      dtypeGroup: CACHES,
      doc: "[nHeads, maxSeq, headDim], head-first; written in place; may be half under f32 'values'",
    },
    {
      name: 'values',
      dtypes: FLOAT,
      doc: '[T, nHeads·headDim] or [nHeads·headDim] (one token): heads interleaved, as a projection writes them',
    },
    {
      name: 'position',
      dtypes: ['i32'],
      optional: true,
      attribute: 'position',
      doc: '[1]: the cache row of the first token, read on the device (instead of the attribute) so that a recorded step replays at a new position; a value past maxSeq − T writes nothing outside the cache',
    },
  ],
  attributes: {
    position: { kind: 'number', integer: true, min: 0, doc: 'cache row of the first token' },
  },
  infer([cache, values, positionTensor], { position }) {
    const check = new ArgCheck('kvCacheScatter');
    check.rank('cache', cache!, 3, '[nHeads, maxSeq, headDim]');
    const [nHeads, maxSeq, headDim] = cache!.shape as [number, number, number];
    const rank = values!.shape.length;
    check.shape(
      rank === 1 || rank === 2,
      'values',
      'wrong rank',
      'rank 1 [nHeads·headDim] or rank 2 [T, nHeads·headDim]',
      `rank ${rank} ${formatShape(values!.shape)}`,
    );
    check.dim('values', values!, -1, nHeads * headDim, "nHeads · headDim of 'cache'");
    const tokens = rank === 2 ? values!.shape[0]! : 1;
    checkRowsFit(
      check,
      { argument: 'values', shape: values!.shape, always: false },
      { tokens, maxSeq, position, positionTensor },
    );
    return [{ name: 'cache', shape: cache!.shape, dtype: cache!.dtype, aliasOf: 0 }];
  },
  reference([cache, values, positionTensor], attrs, io) {
    const [nHeads, maxSeq, headDim] = io.outputs[0]!.shape as [number, number, number];
    const values1 = io.inputs[1]!.shape;
    const tokens = values1.length === 2 ? values1[0]! : 1;
    const width = nHeads * headDim;
    const position = deviceAttribute(
      kvCacheScatter,
      'position',
      positionTensor,
      attrs.position,
      0,
      maxSeq - tokens,
    );
    const out = Float32Array.from(cache!);
    for (let t = 0; t < tokens; t++) {
      for (let h = 0; h < nHeads; h++) {
        const dst = (h * maxSeq + position + t) * headDim;
        const src = t * width + h * headDim;
        for (let d = 0; d < headDim; d++) out[dst + d] = values![src + d]!;
      }
    }
    return [out];
  },
  // Reads the new rows and writes them; the rest of the cache is not touched.
  cost: ([cache, values]) => ({
    flops: 0,
    bytes: bytesOf(values) + bytesOf({ shape: values!.shape, dtype: cache!.dtype }),
  }),
});

// ---- incremental attention ----------------------------------------------------

type IncrementalAttentionAttrs = { seqLen: number; scale: number };

export const incrementalAttention = defineKernel<IncrementalAttentionAttrs>({
  name: 'incrementalAttention',
  family: FAMILY,
  summary:
    'out[h] = softmax(scale · q[h] · K[g]ᵀ) · V[g] over the first seqLen cached rows, g = kv head of h',
  inputs: [
    { name: 'q', dtypes: FLOAT, doc: '[nHeads, headDim], one token' },
    {
      name: 'kCache',
      dtypes: FLOAT,
      dtypeGroup: CACHES,
      doc: "[nKvHeads, maxSeq, headDim]; nKvHeads divides nHeads; may be half under f32 'q'",
    },
    {
      name: 'vCache',
      dtypes: FLOAT,
      dtypeGroup: CACHES,
      doc: "[nKvHeads, maxSeq, headDim], the type of 'kCache'",
    },
    {
      name: 'seqLen',
      dtypes: ['i32'],
      optional: true,
      attribute: 'seqLen',
      doc: '[1]: the rows to attend to, read on the device (instead of the attribute) so that a recorded step replays with a new length; a value outside 1 … maxSeq reads nothing outside the caches and leaves out unspecified',
    },
  ],
  attributes: {
    seqLen: {
      kind: 'number',
      integer: true,
      min: 1,
      doc: 'cached rows to attend to; later rows are ignored',
    },
    scale: { kind: 'number', default: 0, min: 0, doc: 'score scale; 0 means 1/sqrt(headDim)' },
  },
  infer([q, kCache, vCache, seqLenTensor], { seqLen }) {
    const check = new ArgCheck('incrementalAttention');
    check.rank('q', q!, 2, '[nHeads, headDim]');
    const [nHeads, headDim] = q!.shape as [number, number];
    const maxSeq = checkKvCaches(check, nHeads, headDim, kCache!, vCache!);
    check.shape(maxSeq >= 1, 'kCache', 'the cache must hold at least one row', 'maxSeq >= 1', kCache!.shape);
    check.attr(
      seqLenTensor !== undefined || seqLen <= maxSeq,
      'seqLen',
      'seqLen must not exceed the cache length',
      `<= maxSeq = ${maxSeq}`,
      seqLen,
    );
    return [{ name: 'out', shape: q!.shape, dtype: q!.dtype }];
  },
  reference([q, kCache, vCache, seqLenTensor], attrs, io) {
    const [nHeads, headDim] = io.outputs[0]!.shape as [number, number];
    const [nKvHeads, maxSeq] = io.inputs[1]!.shape as [number, number, number];
    const seqLen = deviceAttribute(incrementalAttention, 'seqLen', seqLenTensor, attrs.seqLen, 1, maxSeq);
    const scale = attrs.scale;
    const group = nHeads / nKvHeads;
    const s = scale === 0 ? 1 / Math.sqrt(headDim) : scale;
    const out = new Float32Array(nHeads * headDim);
    const weights = new Float64Array(seqLen);
    const acc = new Float64Array(headDim);
    for (let h = 0; h < nHeads; h++) {
      const kv = Math.floor(h / group) * maxSeq * headDim;
      attendRows(q!, h * headDim, kCache!, vCache!, kv, seqLen, headDim, s, out, weights, acc);
    }
    return [out];
  },
  cost([q, kCache, , seqLenTensor], attrs) {
    const [nHeads, headDim] = q!.shape as [number, number];
    const [nKvHeads, maxSeq] = kCache!.shape as [number, number];
    // A length on the device is unknown here: count the whole cache, its bound.
    const seqLen = seqLenTensor ? maxSeq : attrs.seqLen;
    return {
      // q·k and the weighted sum of v (2 flops per multiply-add each), plus max, exp and sum per score.
      flops: nHeads * seqLen * (4 * headDim + 3),
      bytes: 2 * bytesOf(q) + 2 * bytesPerElement(kCache!.dtype) * nKvHeads * seqLen * headDim,
    };
  },
});

// ---- RoPE fused with the KV-cache write ------------------------------------------

type RopeKvScatterAttrs = { position: number; theta: number; layout: 'half' | 'interleaved' };

/**
 * One decode step's rope of q and k and the cache writes of k and v in one
 * kernel. `inverse` is left out: the caches hold forward-rotated keys.
 * With k and v left out, q is a fused projection's output [T, heads +
 * 2·kvHeads, headDim] (each token's q, k and v heads in a row), read in
 * place: no pass splits it.
 */
export const ropeKvScatter = defineKernel<RopeKvScatterAttrs>({
  name: 'ropeKvScatter',
  family: FAMILY,
  summary:
    'rope(q) returned; rope(k) and v written into kCache and vCache at rows position … position + T − 1, in place (frequencies: scaled RoPE)',
  inputs: [
    {
      name: 'q',
      dtypes: FLOAT,
      doc: '[T, heads, headDim], headDim even; without k and v, [T, heads + 2·kvHeads, headDim]: q, k and v of each token in a row',
    },
    {
      name: 'k',
      dtypes: FLOAT,
      optional: true,
      doc: '[T, kvHeads, headDim] or [T, kvHeads·headDim]; left out with v where q holds both',
    },
    { name: 'v', dtypes: FLOAT, optional: true, doc: '[T, kvHeads·headDim]; left out with k' },
    {
      name: 'kCache',
      dtypes: FLOAT,
      dtypeGroup: CACHES,
      doc: "[kvHeads, maxSeq, headDim], head-first; written in place; may be half under f32 'q'",
    },
    {
      name: 'vCache',
      dtypes: FLOAT,
      dtypeGroup: CACHES,
      doc: '[kvHeads, maxSeq, headDim]; written in place',
    },
    {
      name: 'position',
      dtypes: ['i32'],
      optional: true,
      attribute: 'position',
      doc: '[1]: the position and cache row of the first token, read on the device (instead of the attribute) so that a recorded step replays at a new position; a value past maxSeq − T writes nothing outside the caches and leaves which rows change and the returned q unspecified',
    },
    FREQUENCIES_INPUT,
  ],
  attributes: {
    position: { kind: 'number', integer: true, min: 0, doc: 'position and cache row of the first token' },
    theta: rope.attributes.theta,
    layout: rope.attributes.layout,
  },
  infer([q, k, v, kCache, vCache, positionTensor, frequencies], { position }) {
    const check = new ArgCheck('ropeKvScatter');
    check.rank('q', q!, 3, '[T, heads, headDim]');
    const [tokens, , headDim] = q!.shape as [number, number, number];
    check.shape(headDim % 2 === 0, 'q', 'headDim must be even', 'an even last dimension', q!.shape);
    if (frequencies) checkFrequencies(check, frequencies.shape, headDim);
    check.rank('kCache', kCache!, 3, '[kvHeads, maxSeq, headDim]');
    const [kvHeads, maxSeq] = kCache!.shape as [number, number, number];
    check.dim('kCache', kCache!, 2, headDim, "headDim of 'q'");
    check.sameShape('vCache', vCache!, kCache!.shape, "'kCache'");
    const { fused, heads } = checkFusedQkv(check, [q, k, v], kvHeads, "'kCache'");
    if (!fused) {
      const rows = [tokens, kvHeads * headDim];
      check.shape(
        shapesEqual(k!.shape, rows) || shapesEqual(k!.shape, [tokens, kvHeads, headDim]),
        'k',
        "shape must be T of 'q' by the kvHeads and headDim of 'kCache'",
        `${formatShape([tokens, kvHeads, headDim])} or ${formatShape(rows)}`,
        k!.shape,
      );
      check.sameShape('v', v!, rows, "[T, kvHeads·headDim] of 'q' and 'kCache'");
    }
    checkRowsFit(
      check,
      { argument: 'q', shape: q!.shape, always: true },
      { tokens, maxSeq, position, positionTensor },
    );
    return [
      { name: 'q', shape: [tokens, heads, headDim], dtype: q!.dtype },
      { name: 'kCache', shape: kCache!.shape, dtype: kCache!.dtype, aliasOf: 3 },
      { name: 'vCache', shape: vCache!.shape, dtype: vCache!.dtype, aliasOf: 4 },
    ];
  },
  // The unfused chain itself, in f32: rope of q and k at the position, then the two scatters.
  reference(
    [q, k, v, kCache, vCache, positionTensor, frequencies],
    { position: attrPosition, theta, layout },
    io,
  ) {
    const [tokens, heads, headDim] = io.outputs[0]!.shape as [number, number, number];
    const f32Cache = { shape: io.inputs[3]!.shape, dtype: 'f32' as const };
    const [kvHeads, maxSeq] = f32Cache.shape as [number, number, number];
    const [qRows, kRows, vRows] = k
      ? [q!, k, v!]
      : splitFused(q!, tokens, [heads, kvHeads, kvHeads], headDim);
    const position = deviceAttribute(
      ropeKvScatter,
      'position',
      positionTensor,
      attrPosition,
      0,
      maxSeq - tokens,
    );
    const ropeAt = (x: HostArray, shape: number[]) =>
      runReference(
        rope,
        [x, undefined, frequencies],
        { positionOffset: position, theta, inverse: false, layout },
        {
          inputs: [{ shape, dtype: 'f32' }, undefined, io.inputs[6]],
          outputs: [{ name: 'y', shape, dtype: 'f32' }],
        },
      )[0]!;
    const scatter = (cache: HostArray, values: HostArray) =>
      runReference(
        kvCacheScatter,
        [cache, values, undefined],
        { position },
        {
          inputs: [f32Cache, { shape: [tokens, kvHeads * headDim], dtype: 'f32' }],
          outputs: [{ name: 'cache', shape: f32Cache.shape, dtype: 'f32', aliasOf: 0 }],
        },
      )[0]!;
    return [
      ropeAt(qRows, [tokens, heads, headDim]),
      scatter(kCache!, ropeAt(kRows, [tokens, kvHeads, headDim])),
      scatter(vCache!, vRows),
    ];
  },
  // Reads q, k, v (and the frequencies) and writes q and the new cache rows; rope's flops for q and k.
  cost([q, k, v, kCache, , , frequencies]) {
    const [tokens, , headDim] = q!.shape as [number, number, number];
    const kvSize = kCache!.shape[0]! * headDim * tokens;
    const qSize = k ? sizeOf(q!.shape) : sizeOf(q!.shape) - 2 * kvSize;
    const qBytes = bytesOf({ shape: [qSize], dtype: q!.dtype });
    const rows = 2 * bytesPerElement(kCache!.dtype) * kvSize;
    return {
      flops: 3 * (qSize + kvSize),
      bytes: 2 * qBytes + (k ? bytesOf(k) + bytesOf(v) : bytesOf(q) - qBytes) + rows + bytesOf(frequencies),
    };
  },
});
