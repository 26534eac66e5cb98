import {
  type Backend,
  type DType,
  kvCacheScatter,
  ropeKvScatter,
  type Tensor,
  UnsupportedOnBackendError,
} from '@rayo/core';
import type { LlamaConfig } from './config.js';
import type { QuantizedLlamaLayer } from './quantizedLayers.js';
import type { LlamaLayerWeights, LlamaWeights } from './weights.js';

// A layer's q, k and v weights as one [(heads + 2·kvHeads)·headDim, hidden]
// weight: a prompt's chunk then runs one product for the three (one rounding
// of its activations to half on tensor cores, not three), a decode step one
// GEMV, and `ropeKvScatter` reads the fused output in place.

/**
 * `weights` with the q, k and v projections (and biases) of every layer that
 * can take them fused replaced by `qkv` (and `qkvBias`), concatenated on the
 * device; the separate tensors are freed. A layer keeps them apart where a
 * family normalises q and k heads (Qwen3's q and k norms sit between the
 * products and RoPE), where any of the three is quantized (`quantized`) or
 * absent, where the fused weight would not fit one buffer of the backend, or
 * where the backend lacks the kernels (`ropeKvScatter` in `kvCacheDtype`).
 */
export function fuseQkvProjections(
  backend: Backend,
  config: LlamaConfig,
  weights: LlamaWeights,
  kvCacheDtype: DType,
  quantized?: readonly QuantizedLlamaLayer[],
): LlamaWeights {
  if (!fusedQkvSupported(backend, config, kvCacheDtype)) return weights;
  const layers = weights.layers.map((layer, i) => {
    const q = quantized?.[i];
    const { q: wq, k: wk, v: wv } = layer;
    if (q?.q || q?.k || q?.v || !wq || !wk || !wv || layer.qkv) return layer;
    if (wk.dtype !== wq.dtype || wv.dtype !== wq.dtype || !backend.supports(kvCacheScatter.name, wq.dtype))
      return layer;
    if (wq.byteLength + wk.byteLength + wv.byteLength > backend.info.limits.maxBufferBytes) return layer;
    const { q: _q, k: _k, v: _v, qBias, kBias, vBias, ...rest } = layer;
    const qkv = concatRows(backend, [wq, wk, wv]);
    const qkvBias = qBias && kBias && vBias ? concatRows(backend, [qBias, kBias, vBias]) : undefined;
    for (const t of [wq, wk, wv, qBias, kBias, vBias]) t?.dispose();
    return { ...rest, qkv, ...(qkvBias ? { qkvBias } : {}) } satisfies LlamaLayerWeights;
  });
  return { ...weights, layers };
}

/** Whether a model of `config` on `backend` can run fused q, k, v weights. */
function fusedQkvSupported(backend: Backend, config: LlamaConfig, kvCacheDtype: DType): boolean {
  if (config.qkNorm) return false;
  return (
    backend.supports(kvCacheScatter.name) &&
    backend.supports(ropeKvScatter.name) &&
    (kvCacheDtype === 'f32' || backend.supports(ropeKvScatter.name, kvCacheDtype))
  );
}

/**
 * Refuses weights with fused q, k, v on a backend that cannot run them (the
 * fusion checks it; weights made elsewhere are checked here).
 */
export function checkFusedQkvBackend(backend: Backend, weights: LlamaWeights, kvCacheDtype: DType): void {
  if (!weights.layers.some((l) => l.qkv)) return;
  if (backend.supports(ropeKvScatter.name, kvCacheDtype === 'f32' ? undefined : kvCacheDtype)) return;
  throw new UnsupportedOnBackendError(`the ${backend.name} backend cannot run fused q, k, v weights`, {
    kernel: ropeKvScatter.name,
    argument: 'weights.layers[].qkv',
    expected: `a backend whose ${ropeKvScatter.name} runs ${kvCacheDtype} caches, or q, k and v apart`,
    actual: backend.name,
  });
}

/**
 * The rows of `parts` ([n_i, …], one dtype, one row length) one after the
 * other in a new tensor, copied on the device: each part is written as a
 * one-head KV-cache block of the result at its first row (a scatter of its
 * rows, which is a plain row copy), so no weight goes through the host.
 */
function concatRows(backend: Backend, parts: readonly Tensor[]): Tensor {
  const width = parts[0]!.size / parts[0]!.shape[0]!;
  const rows = parts.reduce((n, p) => n + p.shape[0]!, 0);
  const out = backend.zeros(parts[0]!.shape.length === 1 ? [rows] : [rows, width], parts[0]!.dtype);
  const block = out.reshape([1, rows, width]);
  let position = 0;
  for (const part of parts) {
    backend.run(kvCacheScatter, [block, part.reshape([part.shape[0]!, width])], { position });
    position += part.shape[0]!;
  }
  return out;
}
