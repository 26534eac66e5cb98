import { formatShape, type Shape, ShapeError, sizeOf, Tensor } from '@rayo/core';

const adopted = new WeakMap<Tensor, Tensor>();

/**
 * Moves the memory of `base` into a new tensor of another shape that owns it
 * (disposing it frees the memory). `base` must not be used or disposed
 * afterwards; it is kept reachable so that its finalizer cannot free the memory
 * early (a storage's free() is idempotent, so its later run is harmless).
 */
export function adoptAs(base: Tensor, shape: Shape): Tensor {
  if (sizeOf(shape) !== base.size) {
    throw new ShapeError('an adopted tensor must keep the number of elements', {
      operation: 'adoptAs',
      argument: 'shape',
      expected: `a shape of ${base.size} elements`,
      actual: formatShape(shape),
    });
  }
  const owner = new Tensor(base.backend, shape, base.dtype, base.storage());
  adopted.set(owner, base);
  return owner;
}
