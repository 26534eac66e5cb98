import { FLOAT, ropeAttention } from '@rayo/core';
import { type Operand, wgpuKernel } from '../kernel.js';
import { encodeRopeKvScatter } from './decoding.js';
import { encodeIncrementalAttention } from './incrementalAttention.js';

// ropeAttention as its two passes: ropeKvScatter rotates q into scratch and
// writes the new row into the caches, then the decode attention reads the
// length as the position plus one from the same device tensor.

export const ropeAttentionKernel = wgpuKernel(
  ropeAttention,
  (encoder, { inputs, outputs, attrs }) => {
    const [qkv, kCache, vCache, at, frequencies] = inputs as (Operand | undefined)[];
    const [out] = outputs;
    const [heads, headDim] = out!.shape as [number, number];
    const rows = qkv!.shape[0]!;
    if (out!.size === 0) return;
    const bytes = Math.max(16, heads * headDim * (qkv!.dtype === 'f32' ? 4 : 2));
    const q: Operand = {
      buffer: encoder.scratch(Math.ceil(bytes / 16) * 16),
      offset: 0,
      size: heads * headDim,
      shape: [1, heads, headDim],
      dtype: qkv!.dtype,
    };
    encodeRopeKvScatter(
      encoder,
      [{ ...qkv!, shape: [1, rows, headDim] }, undefined, undefined, kCache, vCache, at, frequencies],
      [q, kCache!, vCache!],
      { position: attrs.position ?? 0, theta: attrs.theta, layout: attrs.layout },
    );
    encodeIncrementalAttention(
      encoder,
      [{ ...q, shape: [heads, headDim] }, kCache, vCache, at],
      out!,
      { seqLen: (attrs.position ?? 0) + 1, scale: attrs.scale },
      at !== undefined,
    );
  },
  { dtypes: FLOAT },
);
