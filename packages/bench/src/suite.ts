import { layerNorm, QUANT_FORMATS, rmsNorm, softmax } from '@rayo/core';
import { flashAttentionBackwardCase } from './attentionBackwardCases.js';
import type { BenchCase } from './case.js';
import { pagedAttentionCase } from './pagedCases.js';
import { flashAttention } from './prefillCases.js';
import {
  adamw,
  adamwMulti,
  argmaxCase,
  attention,
  BOTH,
  batchCase,
  clip,
  FULL,
  gateUp,
  gemm,
  gptShapes,
  groupedAttention,
  halfAttention,
  halfGemm,
  halfGemv,
  kvScatter,
  linearCase,
  MIB,
  normMatmul,
  normMatmul3,
  QUICK,
  quantizedGateUp,
  quantizedGemv,
  ropeCase,
  ropeKv,
  rows,
  swigluCase,
  tf32Gemm,
  transfer,
  weightCache,
} from './suiteCases.js';

export { FAMILIES, type FamilyInfo } from './families.js';
export { ceilingCase, copyCase } from './suiteCases.js';

const square = (n: number) => [n, n, n] as const;

const CASES: BenchCase[] = [
  gemm('gemm', square(128), QUICK),
  gemm('gemm', square(256), BOTH),
  ...[512, 1024, 2048, 4096, 8192].map((n) => gemm('gemm', square(n), FULL)),
  gemm('gemm-llm', [16, 256, 688], QUICK),
  gemm('gemm-llm', [64, 256, 256], QUICK),
  gemm('gemm-llm', [1, 4096, 4096], FULL),
  gemm('gemm-llm', [16, 4096, 11008], FULL),
  gemm('gemm-llm', [512, 4096, 4096], FULL),
  gemm('gemm-tb', square(256), QUICK),
  // The first is a decoder's GEMV: one row against a weight stored [N, K].
  ...[[1, 4096, 4096] as const, square(1024), square(4096), [512, 4096, 4096] as const].map((s) =>
    gemm('gemm-tb', s, FULL),
  ),
  gemm('gemm-ta', square(256), QUICK),
  // The last is a weight gradient: Xᵀ·dY over 512 tokens.
  ...[square(1024), square(4096), [4096, 512, 4096] as const].map((s) => gemm('gemm-ta', s, FULL)),
  gemm('gemv', [1, 256, 256], QUICK),
  gemm('gemv', [1, 1024, 1024], BOTH),
  ...[
    [2048, 2048],
    [4096, 11008],
    [11008, 4096],
    [8192, 8192],
  ].map(([k, n]) => gemm('gemv', [1, k!, n!], FULL)),
  tf32Gemm(256, QUICK),
  ...[4096, 8192].map((n) => tf32Gemm(n, FULL)),
  ...(['f16', 'bf16'] as const).flatMap((dtype) => [
    halfGemm(dtype, 256, QUICK),
    ...[4096, 8192].map((n) => halfGemm(dtype, n, FULL)),
  ]),
  ...(['f32', 'bf16', 'f16'] as const).flatMap((x) => [
    halfGemv([1024, 1024], x, QUICK),
    halfGemv([4096, 4096], x, FULL),
    halfGemv([4096, 11008], x, FULL),
  ]),
  ...[1, 4, 64].map((m) => weightCache(m, 512, 512, QUICK)),
  ...[1, 4, 64].map((m) => weightCache(m, 4096, 4096, FULL)),
  rows('softmax', softmax, [64, 4096], 0, BOTH),
  ...(
    [
      [1, 32000],
      [1024, 4096],
      [4096, 4096],
    ] as const
  ).map((s) => rows('softmax', softmax, s, 0, FULL)),
  argmaxCase([1, 32000], BOTH),
  argmaxCase([64, 32000], FULL),
  // Llama 3's vocabulary: one decoder's logits.
  argmaxCase([1, 128256], FULL),
  rows('rmsnorm', rmsNorm, [64, 4096], 1, BOTH, { eps: 1e-5 }),
  ...(
    [
      [1, 4096],
      [512, 4096],
      [4096, 4096],
      [4096, 8192],
    ] as const
  ).map((s) => rows('rmsnorm', rmsNorm, s, 1, FULL, { eps: 1e-5 })),
  rows('layernorm', layerNorm, [64, 4096], 2, BOTH),
  ...(
    [
      [1, 4096],
      [512, 4096],
      [4096, 4096],
      [4096, 8192],
    ] as const
  ).map((s) => rows('layernorm', layerNorm, s, 2, FULL)),
  ropeCase([64, 8, 64], QUICK),
  ...(
    [
      [1, 32, 128],
      [512, 32, 128],
      [4096, 32, 128],
    ] as const
  ).map((s) => ropeCase(s, FULL)),
  swigluCase([64, 1024], QUICK),
  ...(
    [
      [1, 11008],
      [64, 11008],
      [512, 11008],
      [4096, 11008],
    ] as const
  ).map((s) => swigluCase(s, FULL)),
  // The MNIST MLP's hidden layer (a quarter of it in quick mode) and a GPT-2-sized block's up projection.
  linearCase([256, 196, 64], 'relu', QUICK),
  linearCase([1024, 784, 256], 'relu', FULL),
  linearCase([2048, 768, 3072], 'gelu', FULL),
  ...[false, true].map((norm) => gateUp([1, 256, 688], norm, QUICK)),
  ...(
    [
      [1, 2048, 5632],
      [1, 4096, 11008],
    ] as const
  ).flatMap((s) => [false, true].map((norm) => gateUp(s, norm, FULL))),
  normMatmul([1, 256, 256], QUICK),
  ...(
    [
      [1, 2048, 2048],
      [1, 2048, 512],
      [1, 2048, 32000],
      [1, 4096, 4096],
    ] as const
  ).map((s) => normMatmul(s, FULL)),
  normMatmul3([1, 256, 256, 64, 64], QUICK),
  ...(
    [
      [1, 2048, 2048, 512, 512],
      [1, 4096, 4096, 1024, 1024],
    ] as const
  ).map((s) => normMatmul3(s, FULL)),
  ...QUANT_FORMATS.map((format) => quantizedGemv(format, [1, 256, 256], false, QUICK)),
  ...QUANT_FORMATS.flatMap((format) =>
    (
      [
        [1, 4096, 4096],
        [1, 4096, 11008],
        [1, 11008, 4096],
      ] as const
    ).map((s) => quantizedGemv(format, s, false, FULL)),
  ),
  quantizedGemv('q4g128', [1, 4096, 4096], true, FULL),
  // The projections of the decode benchmark's Llama (d 2048, FFN 5632, 8 kv heads of 64).
  ...(
    [
      [1, 2048, 512],
      [1, 2048, 2048],
      [1, 2048, 5632],
      [1, 5632, 2048],
    ] as const
  ).map((s) => quantizedGemv('q4g32', s, false, FULL)),
  quantizedGateUp('q4g32', [1, 256, 256], QUICK),
  quantizedGateUp('q4g32', [1, 2048, 5632], FULL),
  quantizedGateUp('q4g32', [1, 4096, 11008], FULL),
  // Llama-3.1-8B's gate and up in Q4_K (a Q4_K_M file's).
  quantizedGateUp('q4k', [1, 256, 256], QUICK),
  quantizedGateUp('q4k', [1, 4096, 14336], FULL),
  quantizedGateUp('q4k', [1, 256, 256], QUICK, true),
  quantizedGateUp('q4k', [1, 4096, 14336], FULL, true),
  quantizedGemv('q4k', [1, 4096, 14336], false, FULL),
  // The same in Q8_0 (q8g32).
  quantizedGateUp('q8g32', [1, 4096, 14336], FULL),
  quantizedGemv('q8g32', [1, 4096, 14336], false, FULL),
  // Llama-3.1-8B's fused q·k·v and down (a Q4_K_M file keeps half of down in Q6_K),
  // and Llama-3.2-1B's four products in Q4_K.
  ...(['q4k', 'q6k'] as const).flatMap((format) =>
    (
      [
        [1, 4096, 6144],
        [1, 14336, 4096],
      ] as const
    ).map((s) => quantizedGemv(format, s, false, FULL)),
  ),
  ...(
    [
      [1, 2048, 3072],
      [1, 2048, 2048],
      [1, 8192, 2048],
    ] as const
  ).map((s) => quantizedGemv('q4k', s, false, FULL)),
  quantizedGateUp('q4k', [1, 2048, 8192], FULL),
  quantizedGateUp('q4k', [1, 2048, 8192], FULL, true),
  kvScatter(8, 64, 256, 1, QUICK),
  kvScatter(8, 64, 256, 16, QUICK),
  ...[1, 16, 256].map((t) => kvScatter(32, 128, 2048, t, FULL)),
  ropeKv(8, 2, 64, 256, 1, QUICK),
  ...[64, 128].map((dim) => ropeKv(32, 8, dim, 2048, 1, FULL)),
  attention(8, 64, 128, QUICK),
  attention(8, 128, 1024, QUICK),
  ...[128, 512, 2048, 4096, 8192, 32768].map((t) => attention(32, 128, t, FULL)),
  halfAttention(8, 128, 1024, QUICK),
  groupedAttention(8, 2, 64, 256, QUICK),
  // Llama-3.1-8B's (32 × 128 over 8 kv heads) and Llama-3.2-1B's (32 × 64) decode attention.
  ...[256, 1024, 4096, 32768].map((t) => groupedAttention(32, 8, 128, t, FULL)),
  ...[256, 8192, 32768].map((t) => groupedAttention(32, 8, 64, t, FULL)),
  ...[4096, 32768].map((t) => halfAttention(32, 128, t, FULL)),
  attention(8, 64, 4096, FULL),
  attention(8, 128, 32768, FULL),
  attention(64, 128, 4096, FULL),
  attention(64, 64, 32768, FULL),
  pagedAttentionCase(3, 100, 8, 2, 64, QUICK),
  // Llama-3.2-1B's heads (32 × 64 over 8 kv heads) at 1,024 and 4,096 cached tokens.
  ...[1, 16, 64].flatMap((b) => [1024, 4096].map((t) => pagedAttentionCase(b, t, 32, 8, 64, FULL))),
  flashAttention(8, 2, 64, 256, 'bf16', QUICK),
  // A Llama-3-8B-shaped layer's prompt: 32 heads of 128 over 8 kv heads.
  ...[2048, 8192].map((t) => flashAttention(32, 8, 128, t, 'bf16', FULL)),
  // Llama-3.2-1B's prompt (32 heads of 64 over 8 kv heads) over f16 caches: wgpu's subgroup-matrix kernel.
  ...[2048, 8192].map((t) => flashAttention(32, 8, 64, t, 'f16', FULL)),
  flashAttentionBackwardCase(1, 4, 1, 64, 128, QUICK),
  // GPT-2 small's training shape (12 heads of 64, 1,024 tokens, batch 8), and a
  // Llama-shaped layer's (32 heads of 128 over 8 kv heads) at 4,096 tokens.
  flashAttentionBackwardCase(8, 12, 12, 64, 1024, FULL),
  // The same under precision 'half' (bf16 tensor cores), as the bf16 training policy runs it.
  flashAttentionBackwardCase(8, 12, 12, 64, 1024, FULL, 'half'),
  flashAttentionBackwardCase(1, 4, 1, 64, 128, QUICK, 'half'),
  flashAttentionBackwardCase(1, 32, 8, 128, 4096, FULL),
  adamw(1e5, QUICK),
  ...[1e6, 1e7, 1e8].map((n) => adamw(n, FULL)),
  // The MLP 784-256-10 (4 tensors) and a GPT-like model of 148 tensors.
  adamwMulti('mlp-784-256-10', [[256, 784], [256], [10, 256], [10]], BOTH),
  adamwMulti('gpt-12x32-148t', gptShapes(12, 32, 1024, 128), QUICK),
  adamwMulti('gpt-12x128-148t', gptShapes(12, 128, 8192, 512), FULL),
  clip(1e5, QUICK),
  ...[1e6, 1e7, 1e8].map((n) => clip(n, FULL)),
  batchCase(1000, 1024, BOTH),
  batchCase(1000, 65536, FULL),
  ...[4096, MIB].map((b) => transfer('upload', b, BOTH)),
  ...[64 * MIB, 256 * MIB].map((b) => transfer('upload', b, FULL)),
  ...[4096, MIB].map((b) => transfer('read', b, BOTH)),
  ...[64 * MIB, 256 * MIB].map((b) => transfer('read', b, FULL)),
];

/** Every benchmark case (the ceiling copy aside); `selectCases` picks those of a run. */
export const SUITE: readonly BenchCase[] = Object.freeze(CASES);
