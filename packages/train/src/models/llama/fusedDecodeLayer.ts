import {
  type DevicePosition,
  gateUpSwiglu,
  incrementalAttention,
  matmul,
  rmsNormMatmul,
  rmsNormMatmul3,
  ropeKvScatter,
  type Tensor,
  type TrackingRunner,
} from '@rayo/core';
import { fusedQkvAttention } from './attention.js';
import type { LayerCache, LlamaDecoder } from './decoder.js';
import { biased, denseProjection, headNorm, withFrequencies } from './projections.js';
import type { LlamaLayerWeights } from './weights.js';

/**
 * One token through a layer in six kernels: the norm and the q, k, v
 * projections in one launch (one GEMV where they are fused); RoPE of q and
 * k with the cache write of k and v in one; the attention; o with the
 * residual; the norm, gate, up and SwiGLU in one; down with the residual.
 * Dense weights only.
 */
export function fusedDecodeLayer(
  d: LlamaDecoder,
  run: TrackingRunner,
  w: LlamaLayerWeights,
  cache: LayerCache,
  x: Tensor,
  at: number | DevicePosition,
): Tensor {
  const eps = d.config.rmsNormEps;
  const p = (name: 'o' | 'gate' | 'up' | 'down') => denseProjection(w, name);
  const attended = w.qkv
    ? fusedQkvAttention(
        d,
        run,
        biased(run, run.run1(rmsNormMatmul, [x, w.inputNorm, w.qkv], { eps }), w.qkvBias),
        cache,
        at,
      )
    : attention(d, run, w, cache, x, at);
  const x1 = biased(run, run.run1(matmul, [attended, p('o'), x], { transB: true, beta: 1 }), w.oBias);
  const inner = run.run1(gateUpSwiglu, [x1, p('gate'), p('up'), w.postAttentionNorm], { eps });
  return run.run1(matmul, [inner, p('down'), x1], { transB: true, beta: 1 });
}

/** The norm and the q, k, v projections apart, in one launch (with a family's biases and head norms after). */
function attention(
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
  const p = (name: 'q' | 'k' | 'v') => denseProjection(w, name);
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
  return run
    .run1(
      incrementalAttention,
      [qRot!.reshape([heads, headDim]), cache.k, cache.v, onDevice ? at.length : undefined],
      onDevice ? {} : { seqLen: at + 1 },
    )
    .reshape([1, heads * headDim]);
}
