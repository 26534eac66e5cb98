import {
  type Backend,
  copyRows,
  type DType,
  InvalidArgumentError,
  kvCacheScatter,
  type QuantizedWeight,
  quantizedWeightOf,
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
 * where the backend lacks the kernels (`ropeKvScatter` in `kvCacheDtype`, `copyRows`).
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
    if (q?.qkv) {
      // q, k and v fused quantized: their dense biases follow, and any dense q, k, v left (freed when quantized on load) go.
      const { q: _q, k: _k, v: _v, ...rest } = withFusedBias(backend, layer);
      for (const t of [wq, wk, wv]) t?.dispose();
      return rest;
    }
    if (q?.q || q?.k || q?.v || q?.qkv || !wq || !wk || !wv || layer.qkv) return layer;
    if (wk.dtype !== wq.dtype || wv.dtype !== wq.dtype || !backend.supports(copyRows.name, wq.dtype))
      return layer;
    if (wq.byteLength + wk.byteLength + wv.byteLength > backend.info.limits.maxBufferBytes) return layer;
    const { q: _q, k: _k, v: _v, ...rest } = withFusedBias(backend, layer);
    const qkv = concatRows(backend, [wq, wk, wv]);
    for (const t of [wq, wk, wv]) t.dispose();
    return { ...rest, qkv } satisfies LlamaLayerWeights;
  });
  return { ...weights, layers };
}

/** `layer` with its q, k and v biases as one `qkvBias` (the three freed), or as it is without them. */
function withFusedBias(backend: Backend, layer: LlamaLayerWeights): LlamaLayerWeights {
  const { qBias, kBias, vBias, ...rest } = layer;
  if (!qBias || !kBias || !vBias) return layer;
  const qkvBias = concatRows(backend, [qBias, kBias, vBias]);
  for (const t of [qBias, kBias, vBias]) t.dispose();
  return { ...rest, qkvBias };
}

/**
 * `layers` with the quantized q, k and v of every layer that can take them
 * fused replaced by one `qkv` weight of their rows: every tensor of the
 * layouts is row-major [N, …] (codes, scales, zero points, offsets), so the
 * fused weight is each tensor's rows one after the other, joined on the
 * device (the three are freed). A layer keeps them apart where they
 * differ in format, K, scale dtype or zero points, or as
 * `fuseQkvProjections` says (families with q and k head norms, backends).
 */
export async function fuseQuantizedQkv(
  backend: Backend,
  config: LlamaConfig,
  layers: readonly QuantizedLlamaLayer[],
  kvCacheDtype: DType,
): Promise<QuantizedLlamaLayer[]> {
  if (!fusedQkvSupported(backend, config, kvCacheDtype)) return [...layers];
  const fused: QuantizedLlamaLayer[] = [];
  for (const layer of layers) {
    const { q, k, v, ...rest } = layer;
    const parts = [q, k, v].filter((w): w is QuantizedWeight => w !== undefined);
    if (parts.length < 3 || layer.qkv || !parts.every((w) => sameLayout(w, parts[0]!))) {
      fused.push(layer);
      continue;
    }
    const joined = (pick: (w: QuantizedWeight) => Tensor | undefined) => {
      const all = parts.map(pick);
      return all[0] === undefined ? undefined : concatRows(backend, all as Tensor[]);
    };
    const [packed, scales, zeros, offsets] = [
      joined((w) => w.packed),
      joined((w) => w.scales),
      joined((w) => w.zeros),
      joined((w) => w.offsets),
    ];
    const qkv = quantizedWeightOf(
      parts[0]!.format,
      parts.reduce((n, w) => n + w.n, 0),
      parts[0]!.k,
      { packed: packed!, scales: scales!, zeros, offsets },
    );
    for (const w of parts) w.dispose();
    fused.push({ ...rest, qkv });
  }
  return fused;
}

/** Whether two quantized weights' rows can follow each other in one weight. */
function sameLayout(a: QuantizedWeight, b: QuantizedWeight): boolean {
  return (
    a.format === b.format &&
    a.k === b.k &&
    a.scales.dtype === b.scales.dtype &&
    (a.zeros === undefined) === (b.zeros === undefined) &&
    (a.offsets === undefined) === (b.offsets === undefined)
  );
}

/** Whether a model of `config` on `backend` can run fused q, k, v weights. */
function fusedQkvSupported(backend: Backend, config: LlamaConfig, kvCacheDtype: DType): boolean {
  if (config.qkNorm) return false;
  return (
    backend.supports(copyRows.name) &&
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
 * Whether layer `i` has q, k and v fused (dense or quantized); refuses a q,
 * k, v or bias kept apart beside the fused weight, which the layer would
 * not read.
 */
export function checkFusedQkvLayer(
  i: number,
  dense: LlamaLayerWeights,
  quantized: QuantizedLlamaLayer,
): boolean {
  const fused = dense.qkv !== undefined || quantized.qkv !== undefined;
  const quantizedApart = (['q', 'k', 'v'] as const).find((p) => quantized[p] !== undefined);
  const biasApart = (['qBias', 'kBias', 'vBias'] as const).find((p) => dense[p] !== undefined);
  const apart = quantizedApart ?? (quantized.qkv ? biasApart : undefined);
  if (!fused || apart === undefined) return fused;
  throw new InvalidArgumentError(`layer ${i} has q, k and v fused and '${apart}' apart`, {
    operation: 'LlamaModel',
    argument: quantizedApart ? `quantized.layers[${i}].${apart}` : `weights.layers[${i}].${apart}`,
    expected: 'none of q, k, v or their biases apart where a fused qkv holds them (qkvBias)',
    actual: 'a tensor',
  });
}

/**
 * The rows of `parts` ([n_i, …], one dtype and row shape) one after the
 * other in a new tensor, joined on the device with `copyRows`: no weight
 * goes through the host.
 */
function concatRows(backend: Backend, parts: readonly Tensor[]): Tensor {
  const rows = parts.reduce((n, p) => n + p.shape[0]!, 0);
  const out = backend.zeros([rows, ...parts[0]!.shape.slice(1)], parts[0]!.dtype);
  let row = 0;
  for (const part of parts) {
    backend.run(copyRows, [out, part], { row });
    row += part.shape[0]!;
  }
  return out;
}
