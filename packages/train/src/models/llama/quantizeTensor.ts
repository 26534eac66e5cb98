import {
  type Backend,
  defaultScaleDType,
  type HostArray,
  InvalidArgumentError,
  type QuantFormat,
  type QuantizationError,
  type QuantizedWeight,
  quantizationError,
  quantizedWeightOf,
  quantizeRows,
  quantizeWeights,
  quantLayout,
  sum,
  type Tensor,
  toNumbers,
  uploadQuantized,
} from '@rayo/core';

/** One dense weight quantized, and the error it introduced where it was measured (the host path). */
export interface QuantizedTensor {
  readonly weight: QuantizedWeight;
  readonly error?: QuantizationError;
}

/** Reads `dense` [N, K] back, quantizes it with `quantizeWeights` and uploads the result. */
export async function quantizeOnHost(
  backend: Backend,
  dense: Tensor,
  format: QuantFormat,
): Promise<QuantizedTensor> {
  const values = (await dense.read()) as HostArray;
  const host = quantizeWeights(values, dense.shape as [number, number], format, { dtype: dense.dtype });
  return { weight: uploadQuantized(backend, host), error: quantizationError(values, host, dense.dtype) };
}

/**
 * Quantizes `dense` [N, K] where it is with `quantizeRows` (scales stored
 * as `quantizeWeights` stores them), then sums the scales on the device and
 * reads that one number: a NaN sum is a weight that is not finite, refused
 * as the host quantizer refuses it (naming `name`).
 */
export async function quantizeOnDevice(
  backend: Backend,
  dense: Tensor,
  format: QuantFormat,
  name: string,
): Promise<QuantizedTensor> {
  const [n, k] = dense.shape as [number, number];
  const layout = quantLayout(format, k);
  const outputs = backend.run(quantizeRows, [dense], {
    format,
    scaleDType: defaultScaleDType(format),
    zeroPoints: false,
  });
  // Codes and scales, then q4k's, q5k's and q6k's sub-block scales, then offsets.
  const [packed, scales] = outputs;
  const weight = quantizedWeightOf(format, n, k, {
    packed: packed!,
    scales: scales!,
    zeros: layout.subBlockScales ? outputs[2] : undefined,
    offsets: layout.offsets ? outputs.at(-1) : undefined,
  });
  const total = backend.run(sum, [scales!], { axis: 'all' })[0]!;
  const [scaleSum] = toNumbers(total.dtype, (await total.read()) as HostArray);
  total.dispose();
  if (Number.isNaN(scaleSum)) {
    weight.dispose();
    throw new InvalidArgumentError('weights must be finite', {
      operation: 'quantizeLlamaLayers',
      argument: name,
      expected: 'finite weights',
      actual: 'a weight that is NaN or infinite',
    });
  }
  return { weight };
}
