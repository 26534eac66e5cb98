import {
  type DevicePosition,
  gateUpSwiglu,
  incrementalAttention,
  matmul,
  rmsNormMatmul3,
  ropeKvScatter,
  type Tensor,
  type TrackingRunner,
} from '@rayo/core';
import type { LayerCache, LlamaDecoder } from './decoder.js';
import { biased, denseProjection, headNorm, withFrequencies } from './projections.js';
import type { LlamaLayerWeights } from './weights.js';

/**
 * One token through a layer in six kernels: the norm and the q, k, v
 * projections in one launch; RoPE of q and k with the cache write of k and
 * v in one; the attention; o with the residual; the norm, gate, up and
 * SwiGLU in one; down with the residual. Dense weights only.
 */
export function fusedDecodeLayer(
  d: LlamaDecoder,
  run: TrackingRunner,
  w: LlamaLayerWeights,
  cache: LayerCache,
  x: Tensor,
  at: number | DevicePosition,
): Tensor {
  const { config } = d;
  const { rmsNormEps: eps, numAttentionHeads: heads, numKeyValueHeads: kvHeads, headDim, ropeTheta } = config;
  const onDevice = typeof at !== 'number';
  const p = (name: 'q' | 'k' | 'v' | 'o' | 'gate' | 'up' | 'down') => denseProjection(w, name);
  const [q0, k0, v0] = run.run(rmsNormMatmul3, [x, w.inputNorm, p('q'), p('k'), p('v')], { eps });
  // A family's biases and head norms between the projections and the rotation (none for a Llama).
  const q = headNorm(run, config, biased(run, q0!, w.qBias), w.qNorm);
  const k = headNorm(run, config, biased(run, k0!, w.kBias), w.kNorm);
  const v = biased(run, v0!, w.vBias);
  const [qRot] = run.run(
    ropeKvScatter,
    withFrequencies(d, [
      q.reshape([1, heads, headDim]),
      w.kNorm ? k.reshape([1, kvHeads * headDim]) : k,
      v,
      cache.k,
      cache.v,
      onDevice ? at.row : undefined,
    ]),
    onDevice ? { theta: ropeTheta, layout: 'half' } : { position: at, theta: ropeTheta, layout: 'half' },
  );
  const attended = run
    .run1(
      incrementalAttention,
      [qRot!.reshape([heads, headDim]), cache.k, cache.v, onDevice ? at.length : undefined],
      onDevice ? {} : { seqLen: at + 1 },
    )
    .reshape([1, heads * headDim]);
  const x1 = biased(run, run.run1(matmul, [attended, p('o'), x], { transB: true, beta: 1 }), w.oBias);
  const inner = run.run1(gateUpSwiglu, [x1, p('gate'), p('up'), w.postAttentionNorm], { eps });
  return run.run1(matmul, [inner, p('down'), x1], { transB: true, beta: 1 });
}
