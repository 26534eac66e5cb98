import { FLOAT, ropeAttention } from '@rayo/core';
import { type Operand, wgpuKernel } from '../kernel.js';
import { encodeRopeKvScatter } from './decoding.js';
import {
  attentionTakesRope,
  encodeIncrementalAttention,
  encodeRopeAttention,
} from './incrementalAttention.js';
import { ropeFrequencyBinding } from './ropeRotation.js';

// ropeAttention. For an f32 fused row whose heads fit the split shader's
// staged q (headDim a multiple of 4), that shader does it all: it rotates q
// as it stages it, and the workgroup whose chunk holds the position writes
// the new row before it reads the caches. Otherwise its two passes:
// ropeKvScatter rotates q into scratch and writes the row, then the decode
// attention reads the length as the device position plus one.

export const ropeAttentionKernel = wgpuKernel(
  ropeAttention,
  (encoder, { inputs, outputs, attrs }) => {
    const [qkv, kCache, vCache, at, frequencies] = inputs as (Operand | undefined)[];
    const [out] = outputs;
    const [heads, headDim] = out!.shape as [number, number];
    const kvHeads = kCache!.shape[0]!;
    const rows = qkv!.shape[0]!;
    if (out!.size === 0) return;
    const position = attrs.position ?? 0;
    const attention = { seqLen: position + 1, scale: attrs.scale };
    if (attentionTakesRope(qkv!, heads, kvHeads, headDim)) {
      encodeRopeAttention(encoder, [qkv, kCache, vCache, at], out!, attention, {
        layout: attrs.layout,
        table: frequencies !== undefined,
        frequencies: ropeFrequencyBinding(encoder, attrs.theta, headDim, frequencies),
      });
      return;
    }
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
      { position, theta: attrs.theta, layout: attrs.layout },
    );
    encodeIncrementalAttention(
      encoder,
      [{ ...q, shape: [heads, headDim] }, kCache, vCache, at],
      out!,
      attention,
      at !== undefined,
    );
  },
  { dtypes: FLOAT },
);
