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
  checkWeightBytesFitBackend(
    backend,
    [...shapes].map(([name, shape]) => {
      const dtype = dtypeOf(name);
      return {
        name,
        bytes: sizeOf(shape) * bytesPerElement(dtype),
        what: `${dtype}${formatShape(shape)}`,
        hint: 'a smaller weightDtype may fit',
      };
    }),
    api,
  );
}

/** A weight's largest buffer on the device, and what it is (for the message). */
export interface WeightBuffer {
  readonly name: string;
  readonly bytes: number;
  readonly what: string;
  /** What might make it fit. */
  readonly hint?: string;
}

/** `checkWeightsFitBackend` over buffers whose sizes the caller knows (a quantized weight's codes, say). */
export function checkWeightBytesFitBackend(
  backend: Backend,
  buffers: Iterable<WeightBuffer>,
  api: string,
): void {
  const max = backend.info.limits.maxBufferBytes;
  for (const { name, bytes, what, hint } of buffers) {
    if (bytes > max) {
      throw new OutOfMemoryError(`a weight is larger than one buffer of the ${backend.name} device`, {
        operation: api,
        argument: name,
        expected: `<= ${max} bytes (the backend's largest buffer: maxBufferSize on WebGPU)`,
        actual: `${bytes} bytes (${what})${hint ? `; ${hint}` : ''}`,
      });
    }
  }
}
