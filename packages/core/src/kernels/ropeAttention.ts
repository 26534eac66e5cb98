import { bytesPerElement, isHalf, roundedToHalf } from '../dtype.js';
import { defineKernel, deviceAttribute, runReference } from '../kernel.js';
import { ArgCheck } from './check.js';
import { incrementalAttention, ropeKvScatter } from './decoding.js';
import { checkKvCaches } from './kvCacheChecks.js';
import { rope } from './rope.js';
import { checkFrequencies, FREQUENCIES_INPUT } from './ropeFrequencies.js';
import { bytesOf, CACHES, FLOAT } from './vocabulary.js';

// One decode step's attention from its fused q, k, v row in one kernel: RoPE
// of q and k at the token's position, k and v written into the caches at
// that row, and the rotated q attending over rows 0 … position. It is
// ropeKvScatter followed by incrementalAttention over position + 1 rows, so
// that a backend can keep the rotated q and the new row in registers instead
// of a kernel boundary.

type RopeAttentionAttrs = {
  position: number;
  theta: number;
  layout: 'half' | 'interleaved';
  scale: number;
};

export const ropeAttention = defineKernel<RopeAttentionAttrs>({
  name: 'ropeAttention',
  family: 'decoding',
  summary:
    'one token: rope(k) and v written into kCache and vCache at row position, then out[h] = softmax(scale · rope(q[h]) · K[g]ᵀ) · V[g] over rows 0 … position (ropeKvScatter, then incrementalAttention)',
  inputs: [
    {
      name: 'qkv',
      dtypes: FLOAT,
      doc: "[heads + 2·kvHeads, headDim], headDim even: the token's q, k and v heads in a row, as a fused projection writes them",
    },
    {
      name: 'kCache',
      dtypes: FLOAT,
      dtypeGroup: CACHES,
      doc: "[kvHeads, maxSeq, headDim], head-first; row position written in place; may be half under f32 'qkv'",
    },
    {
      name: 'vCache',
      dtypes: FLOAT,
      dtypeGroup: CACHES,
      doc: "[kvHeads, maxSeq, headDim], the type of 'kCache'; row position written in place",
    },
    {
      name: 'position',
      dtypes: ['i32'],
      optional: true,
      attribute: 'position',
      doc: '[1]: the position and cache row of the token, read on the device (instead of the attribute) so that a recorded step replays at a new position; a value outside 0 … maxSeq − 1 reads and writes nothing outside the caches and leaves out and the caches unspecified',
    },
    FREQUENCIES_INPUT,
  ],
  attributes: {
    position: { kind: 'number', integer: true, min: 0, doc: 'position and cache row of the token' },
    theta: rope.attributes.theta,
    layout: rope.attributes.layout,
    scale: incrementalAttention.attributes.scale,
  },
  infer([qkv, kCache, vCache, positionTensor, frequencies], { position }) {
    const check = new ArgCheck('ropeAttention');
    check.rank('qkv', qkv!, 2, '[heads + 2·kvHeads, headDim]');
    const [rows, headDim] = qkv!.shape as [number, number];
    check.shape(headDim % 2 === 0, 'qkv', 'headDim must be even', 'an even last dimension', qkv!.shape);
    if (frequencies) checkFrequencies(check, frequencies.shape, headDim);
    check.rank('kCache', kCache!, 3, '[kvHeads, maxSeq, headDim]');
    const kvHeads = kCache!.shape[0]!;
    const heads = rows - 2 * kvHeads;
    check.shape(
      heads >= 1,
      'qkv',
      "qkv holds the token's heads of q, then kvHeads of k and of v",
      `[heads + ${2 * kvHeads}, ${headDim}] with heads >= 1 (2·kvHeads of 'kCache' after them)`,
      qkv!.shape,
    );
    const maxSeq = checkKvCaches(check, heads, headDim, kCache!, vCache!);
    check.attr(
      positionTensor !== undefined || position < maxSeq,
      'position',
      'the token must fit in the cache',
      `<= maxSeq − 1 = ${maxSeq - 1}`,
      position,
    );
    return [
      { name: 'out', shape: [heads, headDim], dtype: qkv!.dtype },
      { name: 'kCache', shape: kCache!.shape, dtype: kCache!.dtype, aliasOf: 1 },
      { name: 'vCache', shape: vCache!.shape, dtype: vCache!.dtype, aliasOf: 2 },
    ];
  },
  // The unfused pair itself, in f32: ropeKvScatter of the fused row, then the attention over position + 1 rows.
  reference([qkv, kCache, vCache, positionTensor, frequencies], attrs, io) {
    const [rows, headDim] = io.inputs[0]!.shape as [number, number];
    const caches = io.inputs[1]!;
    const [kvHeads, maxSeq] = caches.shape as [number, number, number];
    const heads = rows - 2 * kvHeads;
    const position = deviceAttribute(
      ropeAttention,
      'position',
      positionTensor,
      attrs.position,
      0,
      maxSeq - 1,
    );
    const f32Cache = { shape: caches.shape, dtype: 'f32' as const };
    const [q, k, v] = runReference(
      ropeKvScatter,
      [qkv!, undefined, undefined, kCache!, vCache!, undefined, frequencies],
      { position, theta: attrs.theta, layout: attrs.layout },
      {
        inputs: [
          { shape: [1, rows, headDim], dtype: 'f32' },
          undefined,
          undefined,
          f32Cache,
          f32Cache,
          undefined,
          io.inputs[4],
        ],
        outputs: [
          { name: 'q', shape: [1, heads, headDim], dtype: 'f32' },
          { name: 'kCache', ...f32Cache, aliasOf: 3 },
          { name: 'vCache', ...f32Cache, aliasOf: 4 },
        ],
      },
    );
    // A half cache holds its rows rounded: the attention reads them as stored.
    const half = caches.dtype;
    const stored = isHalf(half) ? [k!, v!].map((c) => roundedToHalf(half, c)) : [k!, v!];
    const [out] = runReference(
      incrementalAttention,
      [q!, stored[0]!, stored[1]!, undefined],
      { seqLen: position + 1, scale: attrs.scale },
      {
        inputs: [{ shape: [heads, headDim], dtype: 'f32' }, f32Cache, f32Cache],
        outputs: [{ name: 'out', shape: [heads, headDim], dtype: 'f32' }],
      },
    );
    return [out!, stored[0]!, stored[1]!];
  },
  // ropeKvScatter's reads and new rows, and the attention's reads of the cache, without q's round trip.
  cost([qkv, kCache, , positionTensor, frequencies], attrs) {
    const [rows, headDim] = qkv!.shape as [number, number];
    const [kvHeads, maxSeq] = kCache!.shape as [number, number];
    const heads = rows - 2 * kvHeads;
    // A position on the device is unknown here: count the whole cache, its bound.
    const seqLen = positionTensor ? maxSeq : attrs.position + 1;
    const cacheElement = bytesPerElement(kCache!.dtype);
    return {
      flops: 3 * (heads + kvHeads) * headDim + heads * seqLen * (4 * headDim + 3),
      bytes:
        bytesOf(qkv) +
        bytesOf(frequencies) +
        2 * cacheElement * kvHeads * headDim +
        2 * cacheElement * kvHeads * seqLen * headDim +
        bytesOf({ shape: [heads, headDim], dtype: qkv!.dtype }),
    };
  },
});
