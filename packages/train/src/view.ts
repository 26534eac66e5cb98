import { formatShape, type Shape, ShapeError, sizeOf, Tensor, type TensorStorage } from '@rayo/core';

// Views share their base's memory. Their storage is a proxy whose free() does
// nothing, so that disposing a view (or the finalizer collecting one) never
// frees memory the base still owns; every other property is the base storage's
// own, read with the base as the receiver so that backends' private fields work.
const views = new WeakMap<Tensor, Tensor>();

function borrowed(storage: TensorStorage): TensorStorage {
  const noop = (): void => {};
  return new Proxy(storage, {
    get(target, property) {
      if (property === 'free') return noop;
      const value: unknown = Reflect.get(target, property, target);
      return typeof value === 'function' ? value.bind(target) : value;
    },
  });
}

/**
 * The same elements under another shape (row-major, so a reshape of a
 * contiguous tensor), without a copy. The view is only valid while `tensor` is
 * live; disposing the view frees nothing.
 */
export function reshapeView(tensor: Tensor, shape: Shape): Tensor {
  if (sizeOf(shape) !== tensor.size || !shape.every((d) => Number.isInteger(d) && d >= 0)) {
    throw new ShapeError('a reshape must keep the number of elements', {
      kernel: 'reshape',
      argument: 'shape',
      expected: `a shape of ${tensor.size} elements (from ${formatShape(tensor.shape)})`,
      actual: formatShape(shape),
    });
  }
  const view = new Tensor(tensor.backend, shape, tensor.dtype, borrowed(tensor.storage()));
  views.set(view, baseOf(tensor));
  return view;
}

/**
 * Moves the memory of `base` into a new tensor of another shape that owns it
 * (disposing it frees the memory). `base` must not be used or disposed
 * afterwards; it is kept reachable so that its finalizer cannot free the memory
 * early (a storage's free() is idempotent, so its later run is harmless).
 */
export function adoptAs(base: Tensor, shape: Shape): Tensor {
  if (sizeOf(shape) !== base.size) {
    throw new ShapeError('an adopted tensor must keep the number of elements', {
      kernel: 'adoptAs',
      argument: 'shape',
      expected: `a shape of ${base.size} elements`,
      actual: formatShape(shape),
    });
  }
  const owner = new Tensor(base.backend, shape, base.dtype, base.storage());
  adopted.set(owner, base);
  return owner;
}

const adopted = new WeakMap<Tensor, Tensor>();

/** Whether `tensor` is a view made by `reshapeView`. */
export function isView(tensor: Tensor): boolean {
  return views.has(tensor);
}

/** The tensor that owns the memory behind `tensor` (itself unless it is a view). */
export function baseOf(tensor: Tensor): Tensor {
  return views.get(tensor) ?? tensor;
}
