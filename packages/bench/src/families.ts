// The benchmark families: how each is titled and charted.

/** What a family's chart shows on its x axis. */
export interface FamilyInfo {
  readonly title: string;
  /** The x axis label. */
  readonly x: string;
  /** The x values are bytes (formatted as KiB, MiB, …). */
  readonly xBytes?: boolean;
  /** Name each x tick's case under it (sizes such as FLOPs do not say which shape they are). */
  readonly caseTicks?: boolean;
}

/** Every family of the suite, in report order. */
export const FAMILIES: Readonly<Record<string, FamilyInfo>> = {
  copy: { title: 'Device copy (the bandwidth ceiling)', x: 'buffer size', xBytes: true },
  gemm: { title: 'fp32 GEMM, square N×N×N', x: 'N' },
  'gemm-llm': { title: 'fp32 GEMM, LLM shapes M×K×N', x: 'FLOP per call', caseTicks: true },
  'gemm-tb': { title: 'fp32 GEMM, B transposed', x: 'FLOP per call', caseTicks: true },
  'gemm-ta': { title: 'fp32 GEMM, A transposed', x: 'FLOP per call', caseTicks: true },
  gemv: { title: 'fp32 GEMV, 1×K×N', x: 'weight bytes', xBytes: true, caseTicks: true },
  'gemm-tf32': {
    title: "fp32 GEMM with precision 'tf32' (tensor cores, as PyTorch's allow_tf32), square N×N×N",
    x: 'FLOP per call',
    caseTicks: true,
  },
  'gemm-half': {
    title: 'Half GEMM (f16, bf16), square N×N×N, f32 accumulation',
    x: 'FLOP per call',
    caseTicks: true,
  },
  'gemv-half': {
    title: 'GEMV against half weights, 1×K×N (x and y f32, or all bf16)',
    x: 'weight bytes',
    xBytes: true,
    caseTicks: true,
  },
  wcache: { title: 'Weight cache matmul, 4096×4096 weights (full) / 512×512 (quick)', x: 'rows M' },
  softmax: { title: 'Softmax over the last axis', x: 'elements' },
  argmax: { title: 'Argmax over the last axis (greedy decoding)', x: 'elements' },
  rmsnorm: { title: 'RMSNorm', x: 'elements' },
  layernorm: { title: 'LayerNorm', x: 'elements' },
  rope: { title: 'RoPE (rotate-half)', x: 'elements' },
  swiglu: { title: 'SwiGLU', x: 'elements' },
  linear: {
    title: 'Linear layer act(x·Wᵀ + b), the bias and activation in the product, M×K → N',
    x: 'FLOP per call',
    caseTicks: true,
  },
  gateup: {
    title: 'gate·up·SwiGLU in one pass, 1×K → N (norm: rmsNorm folded in)',
    x: 'weight bytes',
    xBytes: true,
    caseTicks: true,
  },
  normmatmul: {
    title: 'RMSNorm folded into a product, 1×K → N',
    x: 'weight bytes',
    xBytes: true,
    caseTicks: true,
  },
  qgemv: {
    title:
      'Quantized GEMV: weights as int8 (q8, q8g32, q8g16) or 4-bit codes (q4g32, q4g128, q4g32a with offsets, q4k with 6-bit sub-block scales) or 5-bit codes (q5k, q4k with a high bit; q5g32, q5g32a: GGUF Q5_0 and Q5_1) or 6-bit codes (q6k with int8 sub-block scales), 1×K → N',
    x: 'weight bytes read',
    xBytes: true,
    caseTicks: true,
  },
  normmatmul3: {
    title: 'RMSNorm folded into q, k and v at once, 1×K → N0 + N1 + N2',
    x: 'weight bytes',
    xBytes: true,
    caseTicks: true,
  },
  kvscatter: { title: 'KV-cache scatter', x: 'bytes written', xBytes: true },
  ropekv: {
    title: 'RoPE of q and k fused with the KV-cache writes (one decode step)',
    x: 'bytes written',
    xBytes: true,
  },
  attention: { title: 'Incremental attention (one decode step)', x: 'KV bytes read', xBytes: true },
  'attention-half': {
    title: 'Incremental attention over a bf16 KV cache (one decode step)',
    x: 'KV bytes read',
    xBytes: true,
  },
  'paged-attention': {
    title:
      'Paged attention of B sequences, one token each, over bf16 pages of 16 rows (batched decoding, grouped-query)',
    x: 'KV bytes read',
    xBytes: true,
    caseTicks: true,
  },
  'flash-attention': {
    title:
      'Causal attention of a prompt over its KV cache (prefill, grouped-query), FLOPs of the causal half',
    x: 'FLOP per call',
    caseTicks: true,
  },
  'flash-attention-backward': {
    title: 'Causal attention backward for training (batched, grouped-query), FLOPs of the causal half',
    x: 'FLOP per call',
    caseTicks: true,
  },
  adamw: { title: 'AdamW step', x: 'parameters' },
  adamwMulti: {
    title: 'AdamW over all of a model’s tensors in one call, clipped by a global norm inside it',
    x: 'parameters',
  },
  clip: { title: 'Clip by global norm', x: 'elements' },
  batch: { title: 'Per-kernel overhead: 1000 small kernels in one batch', x: 'elements per kernel' },
  upload: { title: 'Upload (host to device) and sync', x: 'bytes', xBytes: true },
  read: { title: 'Read (device to host)', x: 'bytes', xBytes: true },
};
