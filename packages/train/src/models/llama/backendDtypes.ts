import {
  type Backend,
  cast,
  causalAttention,
  embedding,
  gateUpSwiglu,
  incrementalAttention,
  kvCacheScatter,
  matmul,
  rmsNormMatmul,
  rmsNormMatmul3,
  ropeKvScatter,
  UnsupportedOnBackendError,
} from '@rayo/core';
import type { FloatDType } from '../../checkpoint/floatWords.js';

/** The kernels of a decode step that take the fused path (one token). */
const FUSED = [rmsNormMatmul3, ropeKvScatter, gateUpSwiglu, rmsNormMatmul].map((s) => s.name);

/** Kernels that read the matrix weights or the embedding table, in the weights' dtype. */
function weightKernels(fused: boolean): string[] {
  // The embedded rows are cast to f32 once: the activations stay f32.
  const always = [embedding.name, cast.name, matmul.name];
  return fused ? [...always, rmsNormMatmul3.name, rmsNormMatmul.name, gateUpSwiglu.name] : always;
}

/** Kernels that read or write the KV cache, in the cache's dtype. */
function cacheKernels(fused: boolean): string[] {
  // Decode steps attend with incrementalAttention, prefill chunks with causalAttention.
  const always = [kvCacheScatter.name, incrementalAttention.name, causalAttention.name];
  return fused ? [...always, ropeKvScatter.name] : always;
}

/** Whether `backend` runs the fused decode kernels in these dtypes (f32 needs only the kernels). */
export function fusedDecodeSupported(
  backend: Backend,
  weightDtype: FloatDType,
  cacheDtype: FloatDType,
): boolean {
  const weights = new Set([rmsNormMatmul3.name, rmsNormMatmul.name, gateUpSwiglu.name]);
  return FUSED.every(
    (name) =>
      backend.supports(name) &&
      (weightDtype === 'f32' || !weights.has(name) || backend.supports(name, weightDtype)) &&
      (cacheDtype === 'f32' || name !== ropeKvScatter.name || backend.supports(name, cacheDtype)),
  );
}

/**
 * The KV cache's dtype when the options name none: the weights' own where
 * they are half and the backend runs every cache kernel in it (as
 * transformers and llama.cpp keep a half model's cache), else f32. A half
 * cache halves what each decode step's attention reads and takes cuda's
 * tensor-core decode attention.
 */
export function defaultKvCacheDtype(backend: Backend, weightDtype: FloatDType): FloatDType {
  if (weightDtype === 'f32') return 'f32';
  const fused = fusedDecodeSupported(backend, weightDtype, weightDtype);
  return cacheKernels(fused).every((name) => backend.supports(name, weightDtype)) ? weightDtype : 'f32';
}

/**
 * Refuses, before any weight is uploaded, a backend that cannot run a kernel
 * of the model in its half dtype: an UnsupportedOnBackendError naming the
 * kernel, the option and the dtypes the backend runs it in. Never a silent
 * widening to f32.
 */
export function checkLlamaBackend(
  backend: Backend,
  weightDtype: FloatDType,
  cacheDtype: FloatDType,
  fused: boolean,
): void {
  const needs: [string, string, FloatDType][] = [];
  if (weightDtype !== 'f32')
    for (const k of weightKernels(fused)) needs.push([k, 'weightDtype', weightDtype]);
  if (cacheDtype !== 'f32') for (const k of cacheKernels(fused)) needs.push([k, 'kvCacheDtype', cacheDtype]);
  for (const [kernel, option, dtype] of needs) {
    if (backend.supports(kernel, dtype)) continue;
    const runs = (['f32', 'f16', 'bf16'] as const).filter((d) => backend.supports(kernel, d));
    throw new UnsupportedOnBackendError(`the ${backend.name} backend cannot run ${kernel} in ${dtype}`, {
      operation: kernel,
      argument: option,
      expected: `a backend whose ${kernel} runs ${dtype} (or ${option}: 'f32')`,
      actual: `${backend.name} runs ${kernel} in ${runs.length > 0 ? runs.join(', ') : 'no dtype'}`,
    });
  }
}
