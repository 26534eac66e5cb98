import {
  cast,
  type DevicePosition,
  decodeStep,
  embedding,
  gateUpSwiglu,
  matmul,
  quantizedEmbedding,
  quantizedGateUpSwiglu,
  rmsNorm,
  rmsNormMatmul,
  rope,
  swiglu,
  type Tensor,
  type TrackingRunner,
} from '@rayo/core';
import { chunkAttention, fusedQkvAttention } from './attention.js';
import type { LayerCache, LlamaDecoder } from './decoder.js';
import { fusedDecodeLayer } from './fusedDecodeLayer.js';
import {
  biased,
  gatedChunkWeights,
  type HalfOperand,
  halfOperand,
  headNorm,
  productPrecision,
  project,
  projectionWeight,
  projectNormed,
  qkvHalfOperand,
  quantizedProductFor,
  withFrequencies,
} from './projections.js';
import { quantizedGateUpCall } from './quantizedGateUp.js';
import type { QuantizedLlamaLayer } from './quantizedLayers.js';
import type { LlamaLayerWeights } from './weights.js';

/**
 * The forward pass: logits [T, vocab] of tokens `ids` [T] (i32, on the
 * device) at `at`, recorded into `run` and nothing else: it keeps no state,
 * and every tensor it allocates is tracked by `run`. `at` is the cache row
 * of the first token, baked into the kernels' attributes, or the device
 * tensors a recorded step reads (one token).
 * `eager` (kernels enqueued as they come, not recorded) frees each layer's
 * intermediates after the layer, so that the memory a long prefill needs is
 * one layer's, not all of them. `headRows` computes the head for the last
 * rows alone (logits [headRows, vocab]; all of them when absent): 1 is what
 * generation reads of a prompt.
 * `kvSink` is handed each layer's new rows as well (a layer then runs
 * unfused): its rotated keys and values, or where q, k and v share one
 * weight, their product as it is.
 *
 * A layer takes one of three paths: a chunk (T > 1) attends over the cache
 * with `causalAttention`; one token attends over the cache with
 * `decodeStep`, or, where the decoder is fused and the layer dense, runs
 * `fusedDecodeLayer`'s six kernels.
 */
export function forward(
  d: LlamaDecoder,
  run: TrackingRunner,
  ids: Tensor,
  at: number | DevicePosition,
  eager: boolean,
  headRows?: number,
  kvSink?: KvSink,
): Tensor {
  const { weights } = d;
  let x = embed(d, run, ids);
  weights.layers.forEach((w, i) => {
    const quantized = d.quantizedLayers?.[i];
    const cache = d.caches[i]!;
    const sink = kvSink && ((rows: SunkRows) => kvSink(i, rows));
    x =
      d.fused && x.shape[0] === 1 && !quantized && !sink
        ? fusedDecodeLayer(d, run, w, cache, x, at)
        : layer(d, run, w, quantized, cache, x, at, sink);
    if (eager) run.disposeAllBut(x);
  });
  if (headRows !== undefined && headRows < x.shape[0]!) x = lastRowsOf(d, run, x, headRows);
  return headLogits(d, run, x);
}

/**
 * Where a layer's new rows go besides its cache: a paged cache's pages, for
 * a prompt run for batched decoding.
 */
export type KvSink = (layer: number, rows: SunkRows) => void;

/**
 * A layer's rotated keys and values [T, kvHeads·headDim], or where q, k and v
 * share one weight, that product [T, (heads + 2·kvHeads)·headDim] un-rotated
 * (ropeKvScatter's and ropePagedKvWrite's fused input).
 */
export type SunkRows = { readonly k: Tensor; readonly v: Tensor } | { readonly qkv: Tensor };

/** The f32 activations [T, hidden] of tokens `ids` [T]. */
export function embed(d: LlamaDecoder, run: TrackingRunner, ids: Tensor): Tensor {
  const { weights, config } = d;
  const table = d.quantizedEmbedding;
  const x = table
    ? run.run1(quantizedEmbedding, [ids, table.packed, table.scales, table.zeros, table.offsets], {
        format: table.format,
        dim: config.hiddenSize,
      })
    : run.run1(embedding, [weights.embedding!, ids]);
  // Activations are f32 whatever the table's dtype: the kernels take half weights under f32 activations.
  return x.dtype === 'f32' ? x : run.run1(cast, [x], { to: 'f32' });
}

/** The logits [T, vocab] of the last layer's output x [T, hidden]: the final norm and the head. */
export function headLogits(d: LlamaDecoder, run: TrackingRunner, x: Tensor): Tensor {
  const { weights, config } = d;
  const eps = config.rmsNormEps;
  const head = d.quantizedHead;
  // A quantized head takes the final norm folded in (one launch where the backend folds it).
  if (head) return projectNormed(d, run, x, head, { weight: weights.norm, eps });
  // rmsNorm(x)·headᵀ: one kernel for a fused decode step, the norm and the product otherwise.
  if (d.fused && x.shape[0] === 1) return run.run1(rmsNormMatmul, [x, weights.norm, weights.head!], { eps });
  const rows = x.shape[0]!;
  const precision = productPrecision(d, rows, weights.head!.dtype);
  const out = halfOperand(d, rows, [weights.head]);
  const normed = run.run1(rmsNorm, [x, weights.norm], { eps, ...(out ? { out } : {}) });
  return run.run1(matmul, [normed, weights.head!], {
    transB: true,
    precision,
    ...(out ? { out: 'f32' } : {}),
  });
}

/**
 * One pre-norm block on x [T, hidden], unfused; the residual adds ride on
 * the products' `beta·c`. Fused q, k, v weights take one product for the three.
 */
function layer(
  d: LlamaDecoder,
  run: TrackingRunner,
  w: LlamaLayerWeights,
  quantized: QuantizedLlamaLayer | undefined,
  cache: LayerCache,
  x: Tensor,
  at: number | DevicePosition,
  sink: ((rows: SunkRows) => void) | undefined,
): Tensor {
  // A chunk normalises once for the three projections, into the operand they read; a quantized
  // fused q·k·v product of a few rows folds the norm in.
  const fused = w.qkv || quantized?.qkv;
  const eps = d.config.rmsNormEps;
  const folded = quantized?.qkv && quantizedProductFor(d, x.shape[0]!) ? quantized.qkv : undefined;
  const out = qkvHalfOperand(d, x.shape[0]!, w, quantized);
  const h = folded ? undefined : run.run1(rmsNorm, [x, w.inputNorm], { eps, ...(out ? { out } : {}) });
  // The attention writes the o product's operand as the norm writes q, k and v's.
  const attendedOut = halfOperand(d, x.shape[0]!, [projectionWeight(w, quantized, 'o')]);
  let attended: Tensor;
  if (fused) {
    const product = folded
      ? projectNormed(d, run, x, folded, { weight: w.inputNorm, eps })
      : project(d, run, h!, w, quantized, 'qkv');
    const qkv = biased(run, product, w.qkvBias);
    sink?.({ qkv });
    attended = fusedQkvAttention(d, run, qkv, cache, at, attendedOut);
  } else attended = attention(d, run, w, quantized, cache, h!, at, sink, attendedOut);
  const x1 = biased(run, project(d, run, attended, w, quantized, 'o', x), w.oBias);
  return project(d, run, mlp(d, run, w, quantized, x1, true), w, quantized, 'down', x1);
}

/** The attention of h [T, hidden] from its q, k and v projected apart (with a family's head norms between). */
function attention(
  d: LlamaDecoder,
  run: TrackingRunner,
  w: LlamaLayerWeights,
  quantized: QuantizedLlamaLayer | undefined,
  cache: LayerCache,
  h: Tensor,
  at: number | DevicePosition,
  sink: ((rows: SunkRows) => void) | undefined,
  out: HalfOperand | undefined,
): Tensor {
  const { config } = d;
  const { numAttentionHeads: heads, numKeyValueHeads: kvHeads, headDim, ropeTheta } = config;
  const t = h.shape[0]!;
  const onDevice = typeof at !== 'number';
  const projected = (name: 'q' | 'k' | 'v') =>
    biased(run, project(d, run, h, w, quantized, name), w[`${name}Bias`]);
  const rotate = (z: Tensor, n: number) =>
    run.run1(
      rope,
      withFrequencies(d, [z.reshape([t, n, headDim]), onDevice ? at.row : undefined]),
      onDevice
        ? { theta: ropeTheta, layout: 'half' }
        : { positionOffset: at, theta: ropeTheta, layout: 'half' },
    );
  const q = rotate(headNorm(run, config, projected('q'), w.qNorm), heads);
  const k = rotate(headNorm(run, config, projected('k'), w.kNorm), kvHeads).reshape([t, kvHeads * headDim]);
  const v = projected('v');
  sink?.({ k, v });
  return t === 1
    ? decodeStep(run, {
        q: q.reshape([heads, headDim]),
        k,
        v,
        kCache: cache.k,
        vCache: cache.v,
        position: at,
      }).reshape([1, heads * headDim])
    : chunkAttention(run, q, k, v, cache, onDevice ? 0 : at, out);
}

/** The last `rows` rows of x [T, hidden] as [rows, hidden]: a gather (`embedding` with x as the table). */
function lastRowsOf(d: LlamaDecoder, run: TrackingRunner, x: Tensor, rows: number): Tensor {
  const first = x.shape[0]! - rows;
  const ids = run.adopt(
    d.backend.upload(
      Int32Array.from({ length: rows }, (_, i) => first + i),
      [rows],
      'i32',
    ),
  );
  return run.run1(embedding, [x, ids]);
}

/**
 * silu(h·gateᵀ) ⊙ (h·upᵀ) with h = rmsNorm(x1), unfused (a fused decode step
 * has its own path). `halfOperands`: the norm and SwiGLU write the half
 * operands of the products they feed (see `halfOperand`).
 */
export function mlp(
  d: LlamaDecoder,
  run: TrackingRunner,
  w: LlamaLayerWeights,
  quantized: QuantizedLlamaLayer | undefined,
  x1: Tensor,
  halfOperands = false,
): Tensor {
  const operand = (names: readonly ('gate' | 'up' | 'down')[]) => {
    const out = halfOperands
      ? halfOperand(
          d,
          x1.shape[0]!,
          names.map((name) => projectionWeight(w, quantized, name)),
        )
      : undefined;
    return out ? { out } : {};
  };
  // Decoding with quantized gate and up: one launch, the norm folded in, the two products never written.
  const eps = d.config.rmsNormEps;
  const fused = quantizedGateUpCall(d.backend, quantized, x1, d.quantizedActivations, {
    weight: w.postAttentionNorm,
    eps,
  });
  if (fused) return run.run1(quantizedGateUpSwiglu, fused.inputs, fused.attrs);
  const h1 = run.run1(rmsNorm, [x1, w.postAttentionNorm], { eps, ...operand(['gate', 'up']) });
  // A chunk's gate and up in one tensor-core product whose epilogue applies silu · mul.
  const gated = gatedChunkWeights(d, run, w, quantized, h1, operand(['down']).out);
  if (gated) return run.run1(gateUpSwiglu, [h1, gated.gate, gated.up]);
  const gate = project(d, run, h1, w, quantized, 'gate');
  const up = project(d, run, h1, w, quantized, 'up');
  return run.run1(swiglu, [gate, up], operand(['down']));
}
