import { type Backend, Tensor, type TensorStorage } from './backend.js';
import { type DType, type HostArray, hostArrayMatches, isDType, toHostArray } from './dtype.js';
import { BackendMismatchError, DTypeError, InvalidArgumentError, ShapeError } from './errors.js';
import { checkTensorAlive } from './kernelChecks.js';
import { formatShape, isValidShape, type Shape, sizeOf } from './shape.js';

/** Checks the shape and dtype a backend API (`upload`, `empty`, …) was given. */
export function checkShapeAndDType(api: string, shape: Shape, dtype: DType): void {
  if (!isValidShape(shape)) {
    throw new InvalidArgumentError('invalid shape', {
      operation: api,
      argument: 'shape',
      expected: 'an array of non-negative integers',
      actual: JSON.stringify(shape),
    });
  }
  if (!isDType(dtype)) {
    throw new DTypeError('unknown element type', {
      operation: api,
      argument: 'dtype',
      expected: 'f32 | f16 | bf16 | i32 | u32',
      actual: String(dtype),
    });
  }
}

/**
 * The host array to copy to a tensor of `shape` and `dtype`: numbers are
 * converted, a typed array of the dtype's class is returned as it is (not
 * copied), anything else is refused naming the API.
 */
export function hostDataFor(
  api: string,
  data: HostArray | readonly number[],
  shape: Shape,
  dtype: DType,
): HostArray {
  const n = sizeOf(shape);
  if (data.length !== n) {
    throw new ShapeError('data length does not match the shape', {
      operation: api,
      argument: 'data',
      expected: `${n} elements for ${formatShape(shape)}`,
      actual: `${data.length} elements`,
    });
  }
  if (Array.isArray(data)) {
    if (dtype === 'i32' || dtype === 'u32') checkIntegers(api, dtype, data);
    return toHostArray(dtype, data);
  }
  if (hostArrayMatches(dtype, data as HostArray)) return data as HostArray;
  throw new DTypeError('typed array does not hold this element type', {
    operation: api,
    argument: 'data',
    expected: `the host array of ${dtype}`,
    actual: (data as HostArray).constructor.name,
  });
}

const INTEGER_RANGES = { i32: [-(2 ** 31), 2 ** 31 - 1], u32: [0, 2 ** 32 - 1] } as const;

/**
 * Numbers bound for an i32 or u32 tensor must be integers in its range: the
 * typed array would otherwise wrap or truncate them silently.
 */
function checkIntegers(api: string, dtype: 'i32' | 'u32', data: readonly number[]): void {
  const [lo, hi] = INTEGER_RANGES[dtype];
  for (let i = 0; i < data.length; i++) {
    const v = data[i];
    if (Number.isInteger(v) && v! >= lo && v! <= hi) continue;
    throw new InvalidArgumentError(`a value does not fit ${dtype}`, {
      operation: api,
      argument: 'data',
      expected: `integers in [${lo}, ${hi}] for a ${dtype} tensor`,
      actual: `${describeNumber(v)} at index ${i}`,
    });
  }
}

function describeNumber(v: unknown): string {
  return typeof v === 'number' ? String(v) : `${typeof v} ${String(v)}`;
}

/**
 * The storage of `tensor` when it belongs to `backend`; otherwise a RayoError
 * naming the API and the argument (not a tensor, or another backend's tensor).
 */
export function ownedStorage<S extends TensorStorage>(
  backend: Backend,
  api: string,
  tensor: Tensor,
  argument: string,
): S {
  if (!(tensor instanceof Tensor)) {
    throw new InvalidArgumentError('not a tensor', {
      operation: api,
      argument,
      expected: 'a Tensor',
      actual: String(tensor),
    });
  }
  if (tensor.backend !== backend) {
    throw new BackendMismatchError('tensor lives on another backend', {
      operation: api,
      argument,
      expected: `a tensor on this ${backend.name} backend`,
      actual: `a tensor on ${tensor.backend.name}`,
    });
  }
  return tensor.storage<S>();
}

/**
 * What `Backend.write` checks before it copies: `tensor` is a live tensor of
 * `backend` and `data` fits its shape and dtype. Returns the tensor's storage
 * and the data as the dtype's host array (the caller's own array when it
 * already is one: copy it if the write completes later).
 */
export function checkWrite<S extends TensorStorage>(
  backend: Backend,
  tensor: Tensor,
  data: HostArray | readonly number[],
): { storage: S; data: HostArray } {
  if (tensor instanceof Tensor) checkTensorAlive('write', 'tensor', tensor);
  const storage = ownedStorage<S>(backend, 'write', tensor, 'tensor');
  if (
    data === null ||
    typeof data !== 'object' ||
    typeof (data as { length?: unknown }).length !== 'number'
  ) {
    throw new InvalidArgumentError('data must be an array of numbers or a typed array', {
      operation: 'write',
      argument: 'data',
      expected: `${tensor.size} elements of ${tensor.dtype}`,
      actual: String(data),
    });
  }
  return { storage, data: hostDataFor('write', data, tensor.shape, tensor.dtype) };
}
