// The benchmark suite's case constructors: each builds the inputs, reference
// check and FLOP/byte counts of one kernel at one shape (suite.ts lists them).

import {
  type AnyKernelSpec,
  adamwStep,
  add,
  argmax,
  clipByGlobalNorm,
  copy,
  gateUpSwiglu,
  incrementalAttention,
  kvCacheScatter,
  type LinearActivation,
  linear,
  matmul,
  multiTensorAdamw,
  type QuantFormat,
  quantizedGateUpSwiglu,
  quantizedMatmul,
  quantLayout,
  rmsNormMatmul,
  rmsNormMatmul3,
  rope,
  ropeKvScatter,
  swiglu,
} from '@rayo/core';
import { type Rng, ropeTolerance } from '@rayo/core/testing';
import {
  type BenchCase,
  type BenchInput,
  type CheckTolerance,
  elementSubset,
  linearRowSubset,
  matmulRowSubset,
  type SuiteMode,
} from './case.js';

export type Modes = { readonly quick?: boolean; readonly full?: boolean };
export const QUICK: Modes = { quick: true, full: false };
export const FULL: Modes = { quick: false, full: true };
export const BOTH: Modes = { quick: true, full: true };

const MAX_TOL: CheckTolerance = { rtol: 1e-3, atol: 0, relativeTo: 'max' };
const ELEMENT_TOL: CheckTolerance = { rtol: 1e-4, atol: 1e-6 };
const EXACT: CheckTolerance = { rtol: 0, atol: 0 };

/** GEMMs at or above this many multiply-adds check sampled rows only. */
const FULL_CHECK_MACS = 512 ** 3;
const SAMPLED_ROWS = 24;
/** Elementwise cases above this many elements check a sample of them. */
const FULL_CHECK_ELEMENTS = 1 << 22;
const SAMPLED_ELEMENTS = 1 << 16;

export const MIB = 2 ** 20;

export function modes(m: Modes) {
  return { quick: m.quick ?? false, full: m.full ?? false };
}

type GemmVariant = 'gemm' | 'gemm-llm' | 'gemm-tb' | 'gemm-ta' | 'gemv';

export function gemm(
  family: GemmVariant,
  [m, k, n]: readonly [number, number, number],
  when: Modes,
): BenchCase {
  const transA = family === 'gemm-ta';
  const transB = family === 'gemm-tb';
  const flops = 2 * m * k * n;
  const x = family === 'gemm' ? n : family === 'gemv' ? 4 * k * n : flops;
  return {
    id: `${family}/${m}x${k}x${n}`,
    family,
    spec: matmul,
    inputs: [{ shape: transA ? [k, m] : [m, k] }, { shape: transB ? [n, k] : [k, n] }],
    attrs: { transA, transB },
    // Few rows read the whole weight once: memory-bound.
    bound: m < 64 ? 'bytes' : 'flops',
    x,
    ...modes(when),
    tolerance: MAX_TOL,
    ...(m * k * n > FULL_CHECK_MACS && m > SAMPLED_ROWS
      ? { subset: matmulRowSubset(m, k, n, SAMPLED_ROWS, { transA, transB }) }
      : {}),
  };
}

/** Unit roundoff of a storage dtype: half outputs are checked to a few of them. */
const UNIT_ROUNDOFF: Readonly<Record<'f16' | 'bf16', number>> = { f16: 2 ** -11, bf16: 2 ** -8 };

export function halfTolerance(dtype: 'f16' | 'bf16'): CheckTolerance {
  return { rtol: 4 * UNIT_ROUNDOFF[dtype], atol: 0, relativeTo: 'max' };
}

/** A square product with both operands (and so the output) in `dtype`. */
export function halfGemm(dtype: 'f16' | 'bf16', n: number, when: Modes): BenchCase {
  return {
    id: `gemm-half/${dtype}-${n}x${n}x${n}`,
    family: 'gemm-half',
    spec: matmul,
    inputs: [
      { shape: [n, n], dtype },
      { shape: [n, n], dtype },
    ],
    attrs: { transA: false, transB: false },
    bound: 'flops',
    x: 2 * n ** 3,
    ...modes(when),
    tolerance: halfTolerance(dtype),
    ...(n ** 3 > FULL_CHECK_MACS
      ? { subset: matmulRowSubset(n, n, n, SAMPLED_ROWS, { dtypes: [dtype, dtype] }) }
      : {}),
  };
}

/** tf32's unit roundoff (10 explicit mantissa bits): its products are checked to a few of them. */
const TF32_ROUNDOFF = 2 ** -11;

/** A square f32 product that allows tf32 tensor cores (opt-in; PyTorch's side sets allow_tf32). */
export function tf32Gemm(n: number, when: Modes): BenchCase {
  return {
    id: `gemm-tf32/${n}x${n}x${n}`,
    family: 'gemm-tf32',
    spec: matmul,
    inputs: [{ shape: [n, n] }, { shape: [n, n] }],
    attrs: { transA: false, transB: false, precision: 'tf32' },
    bound: 'flops',
    x: 2 * n ** 3,
    ...modes(when),
    tolerance: { rtol: 4 * TF32_ROUNDOFF, atol: 0, relativeTo: 'max' },
    ...(n ** 3 > FULL_CHECK_MACS ? { subset: matmulRowSubset(n, n, n, SAMPLED_ROWS) } : {}),
  };
}

/**
 * One row against a half weight stored [N, K], as a decoder's linear layers
 * hold it: x (and y) f32 against bf16 weights, or x, weights and y all bf16
 * (`bf16`) or all f16 (`f16`).
 */
export function halfGemv(
  [k, n]: readonly [number, number],
  x: 'f32' | 'bf16' | 'f16',
  when: Modes,
): BenchCase {
  const weights = x === 'f16' ? 'f16' : 'bf16';
  return {
    id: `gemv-half/${x === 'f32' ? 'f32xbf16' : x}-1x${k}x${n}`,
    family: 'gemv-half',
    spec: matmul,
    inputs: [
      { shape: [1, k], dtype: x },
      { shape: [n, k], dtype: weights },
    ],
    attrs: { transB: true },
    bound: 'bytes',
    x: 2 * k * n,
    ...modes(when),
    tolerance: x === 'f32' ? MAX_TOL : halfTolerance(weights),
  };
}

export function weightCache(m: number, k: number, n: number, when: Modes): BenchCase {
  return {
    id: `wcache/${m}x${k}x${n}`,
    family: 'wcache',
    spec: matmul,
    via: 'weightCache',
    // x [M, K] against a weight stored [N, K], as a linear layer holds it.
    inputs: [{ shape: [m, k] }, { shape: [n, k] }],
    attrs: { transB: true },
    bound: m < 64 ? 'bytes' : 'flops',
    x: m,
    ...modes(when),
    tolerance: MAX_TOL,
  };
}

/** A kernel over rows of the last axis, with optional per-feature vectors. */
export function rows(
  family: string,
  spec: AnyKernelSpec,
  [r, n]: readonly [number, number],
  vectors: number,
  when: Modes,
  attrs: BenchCase['attrs'] = {},
): BenchCase {
  return {
    id: `${family}/${r}x${n}`,
    family,
    spec,
    inputs: [
      { shape: [r, n] },
      ...Array.from({ length: vectors }, () => ({ shape: [n], fill: 'positive' as const })),
    ],
    attrs,
    bound: 'bytes',
    x: r * n,
    ...modes(when),
    tolerance: { rtol: 1e-4, atol: 1e-5 },
  };
}

/** Rows of logits to the index of their largest value: what greedy decoding reads back. */
export function argmaxCase([r, n]: readonly [number, number], when: Modes): BenchCase {
  return { ...rows('argmax', argmax, [r, n], 0, when), tolerance: EXACT };
}

export function ropeCase([seq, heads, dim]: readonly [number, number, number], when: Modes): BenchCase {
  const positionOffset = seq === 1 ? 4095 : 0;
  return {
    id: `rope/${seq}x${heads}x${dim}`,
    family: 'rope',
    spec: rope,
    inputs: [{ shape: [seq, heads, dim] }],
    attrs: { positionOffset },
    bound: 'bytes',
    x: seq * heads * dim,
    ...modes(when),
    // The conformance suite's bound: f32 angles lose digits as positions grow.
    tolerance: ropeTolerance(positionOffset + seq - 1),
  };
}

export function swigluCase([r, n]: readonly [number, number], when: Modes): BenchCase {
  const size = r * n;
  return {
    id: `swiglu/${r}x${n}`,
    family: 'swiglu',
    spec: swiglu,
    inputs: [{ shape: [r, n] }, { shape: [r, n] }],
    bound: 'bytes',
    x: size,
    ...modes(when),
    tolerance: ELEMENT_TOL,
    ...(size > FULL_CHECK_ELEMENTS ? { subset: elementSubset(size, SAMPLED_ELEMENTS) } : {}),
  };
}

/** act(x·Wᵀ + b) against a weight stored [N, K]: a training layer's forward, z kept for its backward. */
export function linearCase(
  [m, k, n]: readonly [number, number, number],
  activation: LinearActivation,
  when: Modes,
): BenchCase {
  // relu's backward reads y; the others keep z, as a training step does.
  const preActivation = activation !== 'none' && activation !== 'relu';
  return {
    id: `linear/${m}x${k}x${n}-${activation}`,
    family: 'linear',
    spec: linear,
    inputs: [{ shape: [m, k] }, { shape: [n, k] }, { shape: [n] }],
    attrs: { activation, preActivation },
    bound: m < 64 ? 'bytes' : 'flops',
    x: 2 * m * k * n,
    ...modes(when),
    tolerance: MAX_TOL,
    ...(m * k * n > FULL_CHECK_MACS && m > SAMPLED_ROWS
      ? { subset: linearRowSubset(m, k, n, SAMPLED_ROWS) }
      : {}),
  };
}

/**
 * silu(x·Wgᵀ) ⊙ (x·Wuᵀ) against weights stored [N, K], with rmsNorm of x
 * folded in when `norm`: the decoder's MLP up to the down projection.
 */
export function gateUp([m, k, n]: readonly [number, number, number], norm: boolean, when: Modes): BenchCase {
  return {
    id: `gateup/${m}x${k}x${n}${norm ? '-norm' : ''}`,
    family: 'gateup',
    spec: gateUpSwiglu,
    inputs: [
      { shape: [m, k] },
      { shape: [n, k] },
      { shape: [n, k] },
      ...(norm ? [{ shape: [k], fill: 'positive' as const }] : []),
    ],
    attrs: { eps: 1e-5 },
    bound: 'bytes',
    x: 2 * 4 * k * n,
    ...modes(when),
    tolerance: MAX_TOL,
  };
}

/** rmsNorm(x)·Wᵀ against a weight stored [N, K]: a decoder's attention projections and head. */
export function normMatmul([m, k, n]: readonly [number, number, number], when: Modes): BenchCase {
  return {
    id: `normmatmul/${m}x${k}x${n}`,
    family: 'normmatmul',
    spec: rmsNormMatmul,
    inputs: [{ shape: [m, k] }, { shape: [k], fill: 'positive' }, { shape: [n, k] }],
    attrs: { eps: 1e-5 },
    bound: 'bytes',
    x: 4 * k * n,
    ...modes(when),
    tolerance: MAX_TOL,
  };
}

/** rmsNorm(x)·W_iᵀ against three weights stored [N_i, K] in one launch: a decoder's q, k and v. */
export function normMatmul3(
  [m, k, ...ns]: readonly [number, number, number, number, number],
  when: Modes,
): BenchCase {
  return {
    id: `normmatmul3/${m}x${k}x${ns.join('+')}`,
    family: 'normmatmul3',
    spec: rmsNormMatmul3,
    inputs: [{ shape: [m, k] }, { shape: [k], fill: 'positive' }, ...ns.map((n) => ({ shape: [n, k] }))],
    attrs: { eps: 1e-5 },
    bound: 'bytes',
    x: 4 * k * ns.reduce((a, b) => a + b, 0),
    ...modes(when),
    tolerance: MAX_TOL,
  };
}

/**
 * x·dequant(W)ᵀ for a weight [N, K] in a quantized format (random codes,
 * scales that keep |w| near 1): what a decode step reads instead of f32 or
 * bf16 weights. Bytes-bound; the x axis is the codes, scales and zero points.
 */
export function quantizedGemv(
  format: QuantFormat,
  [m, k, n]: readonly [number, number, number],
  zeroPoints: boolean,
  when: Modes,
): BenchCase {
  const layout = quantLayout(format, k);
  const q8 = layout.bits === 8;
  const words = (rng: Rng, size: number) => Array.from({ length: size }, () => rng.int(0, 2 ** 32));
  const [lo, hi] = q8 ? [0.002, 0.008] : [0.02, 0.066];
  // What quantizeWeights (and the GGUF repacks) store: f32 scales for q8, q8g16 (Q6_K), q4g32a (Q4_K) and q8g32a (Q5_K), else f16.
  const scaleF32 = format === 'q8' || format === 'q8g16' || format === 'q4g32a' || format === 'q8g32a';
  const scaleBytes = n * layout.groups * (scaleF32 ? 4 : 2) * (layout.offsets ? 2 : 1);
  const groupValues = (from: number, to: number) => ({
    shape: [n, layout.groups],
    dtype: scaleF32 ? ('f32' as const) : ('f16' as const),
    fill: (rng: Rng, size: number) => Array.from({ length: size }, () => rng.uniform(from, to)),
  });
  return {
    id: `qgemv/${format}${zeroPoints ? 'z' : ''}-${m}x${k}x${n}`,
    family: 'qgemv',
    spec: quantizedMatmul,
    inputs: [
      { shape: [m, k] },
      { shape: [n, layout.rowWords], fill: words },
      groupValues(lo, hi),
      // Zero points, c absent, q4g32a's offsets last.
      ...(zeroPoints ? [{ shape: [n, layout.zeroWords], fill: words }] : []),
      ...(layout.offsets ? [undefined, undefined, groupValues(0, 1)] : []),
    ],
    attrs: { format },
    bound: 'bytes',
    x: n * layout.rowWords * 4 + scaleBytes + (zeroPoints ? n * layout.zeroWords * 4 : 0),
    ...modes(when),
    tolerance: MAX_TOL,
  };
}

/**
 * silu(x·dequant(Wg)ᵀ) ⊙ (x·dequant(Wu)ᵀ) for two weights [N, K] of one
 * format: a quantized decode step's gate, up and SwiGLU in one launch.
 * Bytes-bound; the x axis is both weights' codes and scales.
 */
export function quantizedGateUp(
  format: QuantFormat,
  [m, k, n]: readonly [number, number, number],
  when: Modes,
): BenchCase {
  const layout = quantLayout(format, k);
  const q8 = layout.bits === 8;
  const words = (rng: Rng, size: number) => Array.from({ length: size }, () => rng.int(0, 2 ** 32));
  const [lo, hi] = q8 ? [0.002, 0.008] : [0.02, 0.066];
  const codes = { shape: [n, layout.rowWords], fill: words };
  const scales = {
    shape: [n, layout.groups],
    dtype: q8 ? ('f32' as const) : ('f16' as const),
    fill: (rng: Rng, size: number) => Array.from({ length: size }, () => rng.uniform(lo, hi)),
  };
  return {
    id: `qgemv/gateup-${format}-${m}x${k}x${n}`,
    family: 'qgemv',
    spec: quantizedGateUpSwiglu,
    inputs: [{ shape: [m, k] }, codes, scales, codes, scales],
    attrs: { format },
    bound: 'bytes',
    x: 2 * (n * layout.rowWords * 4 + n * layout.groups * (q8 ? 4 : 2)),
    ...modes(when),
    tolerance: MAX_TOL,
  };
}

export function kvScatter(
  heads: number,
  dim: number,
  maxSeq: number,
  tokens: number,
  when: Modes,
): BenchCase {
  return {
    id: `kvscatter/h${heads}-d${dim}-s${maxSeq}-t${tokens}`,
    family: 'kvscatter',
    spec: kvCacheScatter,
    inputs: [{ shape: [heads, maxSeq, dim] }, { shape: [tokens, heads * dim] }],
    attrs: { position: maxSeq - tokens },
    bound: 'bytes',
    x: 4 * tokens * heads * dim,
    ...modes(when),
    tolerance: EXACT,
  };
}

/** One decode step's rope of q and k and the writes of k and v into the caches' last rows. */
export function ropeKv(
  heads: number,
  kvHeads: number,
  dim: number,
  maxSeq: number,
  tokens: number,
  when: Modes,
): BenchCase {
  const position = maxSeq - tokens;
  const cache = { shape: [kvHeads, maxSeq, dim] };
  return {
    id: `ropekv/h${heads}-kv${kvHeads}-d${dim}-s${maxSeq}-t${tokens}`,
    family: 'ropekv',
    spec: ropeKvScatter,
    inputs: [
      { shape: [tokens, heads, dim] },
      { shape: [tokens, kvHeads, dim] },
      { shape: [tokens, kvHeads * dim] },
      cache,
      cache,
    ],
    attrs: { position },
    bound: 'bytes',
    x: 4 * tokens * (heads + 2 * kvHeads) * dim,
    ...modes(when),
    tolerance: ropeTolerance(maxSeq - 1),
  };
}

export function attention(heads: number, dim: number, tokens: number, when: Modes): BenchCase {
  return {
    id: `attention/h${heads}-d${dim}-t${tokens}`,
    family: 'attention',
    spec: incrementalAttention,
    inputs: [{ shape: [heads, dim] }, { shape: [heads, tokens, dim] }, { shape: [heads, tokens, dim] }],
    attrs: { seqLen: tokens },
    bound: 'bytes',
    x: 2 * 4 * heads * tokens * dim,
    ...modes(when),
    tolerance: { rtol: 1e-3, atol: 1e-6, relativeTo: 'max' },
  };
}

/** One decode step's attention over a bf16 KV cache, the query in f32. */
export function halfAttention(heads: number, dim: number, tokens: number, when: Modes): BenchCase {
  return {
    id: `attention-half/h${heads}-d${dim}-t${tokens}`,
    family: 'attention-half',
    spec: incrementalAttention,
    inputs: [
      { shape: [heads, dim] },
      { shape: [heads, tokens, dim], dtype: 'bf16' },
      { shape: [heads, tokens, dim], dtype: 'bf16' },
    ],
    attrs: { seqLen: tokens },
    bound: 'bytes',
    x: 2 * 2 * heads * tokens * dim,
    ...modes(when),
    tolerance: { rtol: 1e-3, atol: 1e-6, relativeTo: 'max' },
  };
}

export function label(count: number): string {
  const exponent = Math.log10(count);
  return Number.isInteger(exponent) ? `1e${exponent}` : String(count);
}

export function adamw(params: number, when: Modes): BenchCase {
  return {
    id: `adamw/${label(params)}`,
    family: 'adamw',
    spec: adamwStep,
    // param, grad, m, v (v is a second moment: positive).
    inputs: [
      { shape: [params] },
      { shape: [params] },
      { shape: [params] },
      { shape: [params], fill: 'positive' },
    ],
    attrs: { lr: 1e-3, beta1: 0.9, beta2: 0.999, eps: 1e-8, weightDecay: 0.01, step: 10 },
    bound: 'bytes',
    x: params,
    ...modes(when),
    tolerance: ELEMENT_TOL,
    ...(params > FULL_CHECK_ELEMENTS ? { subset: elementSubset(params, SAMPLED_ELEMENTS) } : {}),
  };
}

/** The tensor shapes of a GPT-2-like model: embeddings, 12 tensors per layer, the final norm. */
export function gptShapes(layers: number, dim: number, vocab: number, context: number): number[][] {
  const layer = [
    [dim],
    [dim],
    [3 * dim, dim],
    [3 * dim],
    [dim, dim],
    [dim],
    [dim],
    [dim],
    [4 * dim, dim],
    [4 * dim],
    [dim, 4 * dim],
    [dim],
  ];
  return [[vocab, dim], [context, dim], ...Array.from({ length: layers }, () => layer).flat(), [dim], [dim]];
}

/**
 * multiTensorAdamw over a model's tensors, as a training step calls it: the
 * gradients clipped by a device norm (large enough that the clip acts),
 * vectors undecayed.
 */
export function adamwMulti(name: string, shapes: readonly number[][], when: Modes): BenchCase {
  const params = shapes.reduce((sum, s) => sum + s.reduce((a, b) => a * b, 1), 0);
  const norm: BenchInput = { shape: [], fill: () => [1000] };
  return {
    id: `adamwMulti/${name}`,
    family: 'adamwMulti',
    spec: multiTensorAdamw,
    inputs: [
      undefined,
      undefined,
      norm,
      ...shapes.flatMap((shape) => [{ shape }, { shape }, { shape }, { shape, fill: 'positive' as const }]),
    ],
    attrs: {
      lr: 1e-3,
      step: 10,
      weightDecay: shapes.map((s) => (s.length > 1 ? 0.01 : 0)),
      maxNorm: 1,
    },
    bound: 'bytes',
    x: params,
    ...modes(when),
    tolerance: ELEMENT_TOL,
  };
}

export function clip(total: number, when: Modes): BenchCase {
  // Gradients of several sizes, as a model's parameters have.
  const parts = [total / 2, total / 4, total / 8, total / 8];
  return {
    id: `clip/${label(total)}`,
    family: 'clip',
    spec: clipByGlobalNorm,
    inputs: parts.map((p) => ({ shape: [p] })),
    // Below the norm of uniform values (about 0.58·√n): every case scales.
    attrs: { maxNorm: 1 },
    bound: 'bytes',
    x: total,
    ...modes(when),
    tolerance: { rtol: 1e-4, atol: 1e-7 },
  };
}

export function batchCase(chain: number, size: number, when: Modes): BenchCase {
  return {
    id: `batch/${chain}x${size}`,
    family: 'batch',
    spec: add,
    via: 'batch',
    chain,
    inputs: [{ shape: [size] }, { shape: [size] }],
    bound: 'latency',
    x: size,
    ...modes(when),
    tolerance: ELEMENT_TOL,
  };
}

export function bytesLabel(bytes: number): string {
  if (bytes >= MIB && bytes % MIB === 0) return `${bytes / MIB}MiB`;
  return `${bytes / 1024}KiB`;
}

export function transfer(via: 'upload' | 'read', bytes: number, when: Modes): BenchCase {
  return {
    id: `${via}/${bytesLabel(bytes)}`,
    family: via,
    spec: copy,
    via,
    inputs: [{ shape: [bytes / 4] }],
    bound: 'latency',
    x: bytes,
    ...modes(when),
    tolerance: EXACT,
  };
}

/** The device copy that measures a backend's bandwidth ceiling. */
export function copyCase(bytes: number): BenchCase {
  return {
    id: `copy/${bytesLabel(bytes)}`,
    family: 'copy',
    spec: copy,
    inputs: [{ shape: [bytes / 4] }],
    bound: 'bytes',
    x: bytes,
    quick: true,
    full: true,
    tolerance: EXACT,
  };
}

const COPY_BYTES: Readonly<Record<SuiteMode, number>> = { quick: 16 * MIB, full: 256 * MIB };

/**
 * The ceiling case of a mode on a backend: a copy well beyond any L2 cache,
 * never larger than the backend can allocate (`limits.maxBufferBytes`). The
 * copy kernel binds larger operands in pieces where a backend limits one
 * binding (wgpu), so the copy size needs no other bound.
 */
export function ceilingCase(mode: SuiteMode, maxBufferBytes = Number.POSITIVE_INFINITY): BenchCase {
  let bytes = COPY_BYTES[mode];
  while (bytes > maxBufferBytes && bytes > 1024) bytes /= 2;
  return copyCase(bytes);
}
