import type { Backend, KernelRunner, RunOptions, Tensor } from '../backend.js';
import { quantizedMatmul } from '../kernels/quantized.js';
import { type QuantFormat, quantLayout } from './layout.js';
import type { QuantizedHostWeight } from './quantize.js';

/**
 * A quantized weight on a device: the tensors `quantizedMatmul` takes, with
 * what they mean. Disposing it frees them.
 */
export interface QuantizedWeight {
  readonly format: QuantFormat;
  readonly n: number;
  readonly k: number;
  /** u32 [N, rowWords]. */
  readonly packed: Tensor;
  /** [N, groups] in f32, f16 or bf16. */
  readonly scales: Tensor;
  /** u32 [N, ceil(groups / 8)] zero-point nibbles (q4g32, q4g128 only). */
  readonly zeros: Tensor | undefined;
  /** [N, groups] in the scales' dtype: q4g32a's offsets (absent for every other format). */
  readonly offsets: Tensor | undefined;
  /** Bytes of packed data, scales and zero points: what one product reads of the weight. */
  readonly byteLength: number;
  dispose(): void;
  [Symbol.dispose](): void;
}

/**
 * A quantized weight of device tensors already in `format`'s layout (see
 * layout.ts): disposing it frees them.
 */
export function quantizedWeightOf(
  format: QuantFormat,
  n: number,
  k: number,
  tensors: {
    readonly packed: Tensor;
    readonly scales: Tensor;
    readonly zeros?: Tensor | undefined;
    readonly offsets?: Tensor | undefined;
  },
): QuantizedWeight {
  const { packed, scales, zeros, offsets } = tensors;
  const dispose = () => {
    packed.dispose();
    scales.dispose();
    zeros?.dispose();
    offsets?.dispose();
  };
  return {
    format,
    n,
    k,
    packed,
    scales,
    zeros,
    offsets,
    byteLength: packed.byteLength + scales.byteLength + (zeros?.byteLength ?? 0) + (offsets?.byteLength ?? 0),
    dispose,
    [Symbol.dispose]: dispose,
  };
}

/** Uploads a host-quantized weight to `backend`. */
export function uploadQuantized(backend: Backend, weight: QuantizedHostWeight): QuantizedWeight {
  const layout = quantLayout(weight.format, weight.k);
  return quantizedWeightOf(weight.format, weight.n, weight.k, {
    packed: backend.upload(weight.packed, [weight.n, layout.rowWords], 'u32'),
    scales: backend.upload(weight.scales, [weight.n, layout.groups], weight.scaleDType),
    zeros: weight.zeros ? backend.upload(weight.zeros, [weight.n, layout.zeroWords], 'u32') : undefined,
    offsets: weight.offsets
      ? backend.upload(weight.offsets, [weight.n, layout.groups], weight.scaleDType)
      : undefined,
  });
}

/** y = x · dequant(w)ᵀ (+ beta · c) with any runner (a backend, a batch). */
export function runQuantizedMatmul(
  runner: KernelRunner,
  x: Tensor,
  w: QuantizedWeight,
  options: {
    c?: Tensor;
    beta?: number;
    out?: Tensor;
    /** rmsNorm(x, norm.weight, norm.eps) folded in (quantizedMatmul's normWeight). */
    norm?: { readonly weight: Tensor; readonly eps: number };
  } = {},
): Tensor {
  const run: RunOptions = options.out ? { out: [options.out] } : {};
  const attrs = {
    format: w.format,
    ...(options.beta === undefined ? {} : { beta: options.beta }),
    ...(options.norm ? { eps: options.norm.eps } : {}),
  };
  const inputs = [x, w.packed, w.scales, w.zeros, options.c, w.offsets, options.norm?.weight];
  return runner.run(quantizedMatmul, inputs, attrs, run)[0]!;
}
