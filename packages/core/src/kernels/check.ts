import type { DType } from '../dtype.js';
import { DTypeError, InvalidArgumentError, ShapeError } from '../errors.js';
import type { InputMetas, TensorMeta } from '../kernel.js';
import { formatShape, type Shape, shapesEqual } from '../shape.js';

/**
 * Validation helpers for a spec's `infer`: each throws a RayoError naming the
 * kernel, the argument and the expected against the actual value.
 */
export class ArgCheck {
  constructor(readonly kernel: string) {}

  /** The metadata of a required input (the declared checks ensured it is present). */
  input(inputs: InputMetas, index: number): TensorMeta {
    const meta = inputs[index];
    if (!meta)
      throw new InvalidArgumentError('required input is missing', {
        operation: this.kernel,
        argument: `input${index}`,
      });
    return meta;
  }

  rank(argument: string, meta: TensorMeta, rank: number, layout?: string): void {
    if (meta.shape.length !== rank) {
      throw new ShapeError('wrong rank', {
        operation: this.kernel,
        argument,
        expected: `rank ${rank}${layout ? ` ${layout}` : ''}`,
        actual: `rank ${meta.shape.length} ${formatShape(meta.shape)}`,
      });
    }
  }

  minRank(argument: string, meta: TensorMeta, rank: number, layout?: string): void {
    if (meta.shape.length < rank) {
      throw new ShapeError('rank too low', {
        operation: this.kernel,
        argument,
        expected: `rank >= ${rank}${layout ? ` ${layout}` : ''}`,
        actual: `rank ${meta.shape.length} ${formatShape(meta.shape)}`,
      });
    }
  }

  /** Dimension `axis` (negative counts from the end) must equal `size`; `what` says why. */
  dim(argument: string, meta: TensorMeta, axis: number, size: number, what: string): void {
    const a = axis < 0 ? meta.shape.length + axis : axis;
    const actual = meta.shape[a];
    if (actual !== size) {
      throw new ShapeError(`dimension ${a} must match ${what}`, {
        operation: this.kernel,
        argument,
        expected: `dimension ${a} = ${size}`,
        actual: `${actual ?? 'none'} in ${formatShape(meta.shape)}`,
      });
    }
  }

  sameShape(argument: string, meta: TensorMeta, shape: Shape, what: string): void {
    if (!shapesEqual(meta.shape, shape)) {
      throw new ShapeError(`shape must match ${what}`, {
        operation: this.kernel,
        argument,
        expected: formatShape(shape),
        actual: formatShape(meta.shape),
      });
    }
  }

  sameDType(argument: string, meta: TensorMeta, dtype: DType, what: string): void {
    if (meta.dtype !== dtype) {
      throw new DTypeError(`element type must match ${what}`, {
        operation: this.kernel,
        argument,
        expected: dtype,
        actual: meta.dtype,
      });
    }
  }

  /**
   * Grouped-query attention: dimension `axis` of `meta` (named `what`) counts
   * kv heads, each serving heads / kvHeads consecutive query heads, so it
   * must divide `heads`. Returns the kv heads.
   */
  kvHeads(argument: string, meta: TensorMeta, axis: number, what: string, heads: number): number {
    const kvHeads = meta.shape[axis]!;
    this.shape(
      kvHeads > 0 && heads % kvHeads === 0,
      argument,
      `dimension ${axis} (${what}) must divide the number of heads of 'q'`,
      `dimension ${axis} dividing ${heads}`,
      `${kvHeads} in ${formatShape(meta.shape)}`,
    );
    return kvHeads;
  }

  /** A shape condition `ok` that the helpers above cannot express. */
  shape(ok: boolean, argument: string, message: string, expected: string, actual: Shape | string): void {
    if (!ok) {
      throw new ShapeError(message, {
        operation: this.kernel,
        argument,
        expected,
        actual: typeof actual === 'string' ? actual : formatShape(actual),
      });
    }
  }

  /** An attribute condition that its declaration cannot express. */
  attr(ok: boolean, argument: string, message: string, expected: string, actual: string | number): void {
    if (!ok) {
      throw new InvalidArgumentError(message, {
        operation: this.kernel,
        argument: argument.startsWith('attrs.') ? argument : `attrs.${argument}`,
        expected,
        actual: String(actual),
      });
    }
  }
}
