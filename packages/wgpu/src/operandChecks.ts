import {
  type AnyKernelSpec,
  bytesPerElement,
  InvalidArgumentError,
  inputName,
  type OutputMeta,
  ShapeError,
  sizeOf,
  type Tensor,
  UnsupportedOnBackendError,
} from '@rayo/core';
import type { GPUBuffer, GPUDevice } from './webgpuTypes.js';

/**
 * A kernel that cannot split its operands must not see one larger than a
 * binding: refuse it by name instead of computing on a truncated view.
 */
export function checkBindable(
  maxBindingBytes: number,
  spec: AnyKernelSpec,
  inputs: readonly (Tensor | undefined)[],
  outputs: readonly OutputMeta[],
): void {
  const kernel = spec.name;
  const check = (argument: string, bytes: number) => {
    if (bytes > maxBindingBytes) {
      throw new UnsupportedOnBackendError(
        'operand larger than one storage binding, and this kernel cannot split it',
        {
          operation: kernel,
          argument,
          expected: `<= ${maxBindingBytes} bytes (maxStorageBufferBindingSize)`,
          actual: `${bytes} bytes`,
        },
      );
    }
  };
  inputs.forEach((t, i) => {
    if (t) check(inputName(spec, i), t.byteLength);
  });
  for (const o of outputs) check(o.name, sizeOf(o.shape) * bytesPerElement(o.dtype));
}

/** What `importBuffer` requires of a buffer: bindable as storage, aligned, large enough. */
export function checkImportedBuffer(
  device: GPUDevice,
  buffer: GPUBuffer,
  byteLength: number,
  byteOffset: number,
): void {
  const alignment = device.limits.minStorageBufferOffsetAlignment;
  if (!Number.isInteger(byteOffset) || byteOffset % alignment !== 0) {
    throw new InvalidArgumentError('storage bindings must start at an aligned offset', {
      operation: 'importBuffer',
      argument: 'byteOffset',
      expected: `a multiple of ${alignment} (minStorageBufferOffsetAlignment)`,
      actual: String(byteOffset),
    });
  }
  if (byteOffset + byteLength > buffer.size) {
    throw new ShapeError('the buffer is too small for the shape at this offset', {
      operation: 'importBuffer',
      argument: 'buffer',
      expected: `>= ${byteOffset + byteLength} bytes`,
      actual: `${buffer.size} bytes`,
    });
  }
  if (!(buffer.usage & GPUBufferUsage.STORAGE)) {
    throw new InvalidArgumentError('the buffer cannot be bound as storage', {
      operation: 'importBuffer',
      argument: 'buffer',
      expected: 'usage including STORAGE',
      actual: `usage ${buffer.usage}`,
    });
  }
}
