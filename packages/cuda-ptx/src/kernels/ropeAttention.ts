import { FLOAT, ropeAttention } from '@rayo/core';
import { cudaKernel, type Operand } from '../kernel.js';
import { decodeMmaApplies } from './attentionMmaPlan.js';
import { checkElementCount } from './common.js';
import { recordAttention, scaleOf } from './incrementalAttention.js';
import { launchDecodeMma } from './incrementalAttentionMma.js';
import { launchRopeKvScatter } from './kvCache.js';
import { thetaPowers } from './rope.js';
import { STORAGE_BYTES, storageOf } from './storage.js';

// ropeAttention. Where the tensor-core decode attention applies (half
// caches, headDim 64 or 128), one kernel: it rotates q as it loads it from
// the fused row, and the warp whose tile holds the position rotates the kv
// head's k and writes it and v into the caches and over its tile's copy in
// shared memory, so no tile copy waits for the row. Elsewhere its two passes: ropeKvScatter into scratch, then the
// attention over position + 1 rows (the length read as the position plus one).

export const ropeAttentionKernel = cudaKernel(
  ropeAttention,
  (encoder, { inputs, outputs, attrs }) => {
    const [qkv, kCache, vCache, positionAt, frequencies] = inputs as (Operand | undefined)[];
    const out = outputs[0]!;
    if (out.size === 0) return;
    const [heads, headDim] = out.shape as [number, number];
    const [kvHeads, maxSeq] = kCache!.shape as [number, number, number];
    checkElementCount('ropeAttention', 'kCache', kCache!.size);
    checkElementCount('ropeAttention', 'qkv', qkv!.size);
    const position = attrs.position ?? 0;
    const seqLen = positionAt ?? position + 1;
    const shape = { nHeads: heads, nKvHeads: kvHeads, headDim };
    if (decodeMmaApplies(encoder, shape, qkv!, kCache!, vCache!)) {
      const table = frequencies !== undefined;
      launchDecodeMma(
        encoder,
        shape,
        { q: qkv!, kCache: kCache!, vCache: vCache!, scale: scaleOf(attrs.scale, headDim) },
        { kind: 'cache', maxSeq, seqLen, fromPosition: positionAt !== undefined },
        out,
        {
          config: { layout: attrs.layout, table },
          args: table ? { frequencies: frequencies! } : thetaPowers('ropeAttention', attrs.theta, headDim),
        },
      );
      return;
    }
    // The rotated q in the fused row's dtype, as ropeKvScatter writes it.
    const bytes = heads * headDim * STORAGE_BYTES[storageOf(qkv!)];
    const q: Operand = {
      ...qkv!,
      ptr: encoder.scratch(Math.max(16, bytes)),
      size: heads * headDim,
      shape: [1, heads, headDim],
      byteLength: bytes,
    };
    launchRopeKvScatter(
      encoder,
      [
        { ...qkv!, shape: [1, heads + 2 * kvHeads, headDim] },
        undefined,
        undefined,
        kCache,
        vCache,
        positionAt,
        frequencies,
      ],
      [q, kCache!, vCache!],
      { position, theta: attrs.theta, layout: attrs.layout },
    );
    recordAttention(
      encoder,
      { ...q, shape: [heads, headDim] },
      kCache!,
      vCache!,
      out,
      seqLen,
      attrs.scale,
      positionAt !== undefined,
    );
  },
  { dtypes: FLOAT },
);
