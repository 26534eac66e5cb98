import {
  type Backend,
  bytesPerElement,
  type DType,
  formatShape,
  OutOfMemoryError,
  type Shape,
  sizeOf,
} from '@rayo/core';

/**
 * Refuses, before any weight is read, a checkpoint whose largest tensor the
 * backend cannot hold in one buffer (a WebGPU adapter's `maxBufferSize` is
 * often 256 MiB to 4 GiB, below a large vocabulary's embedding): an
 * OutOfMemoryError naming the tensor, its size on the device and the limit,
 * rather than a refusal of an anonymous upload half-way through the load.
 */
export function checkWeightsFitBackend(
  backend: Backend,
  shapes: ReadonlyMap<string, Shape>,
  dtypeOf: (name: string) => DType,
  api = 'LlamaModel.load',
): void {
  const max = backend.info.limits.maxBufferBytes;
  for (const [name, shape] of shapes) {
    const dtype = dtypeOf(name);
    const bytes = sizeOf(shape) * bytesPerElement(dtype);
    if (bytes > max) {
      throw new OutOfMemoryError(`a weight is larger than one buffer of the ${backend.name} device`, {
        operation: api,
        argument: name,
        expected: `<= ${max} bytes (the backend's largest buffer: maxBufferSize on WebGPU)`,
        actual: `${bytes} bytes (${dtype}${formatShape(shape)}); a smaller weightDtype may fit`,
      });
    }
  }
}
