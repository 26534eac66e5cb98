import { mul, scale, sum as sumSpec, sumSquares as sumSquaresSpec } from '@rayo/core';
import { broadcastTo } from '../broadcast.js';
import type { Tape, Variable } from '../tape.js';

export interface ReduceOptions {
  /** 'last': over the last axis, which is dropped; 'all' (default): over everything, to a scalar. */
  readonly axis?: 'last' | 'all';
}

/** The shape `dy` of a reduction takes before broadcasting back to `x`. */
function keptShape(x: Variable, axis: 'last' | 'all'): number[] {
  return axis === 'all' ? [] : [...x.shape.slice(0, -1), 1];
}

/** Sum over the last axis or everything. */
export function sum(tape: Tape, x: Variable, options: ReduceOptions = {}): Variable {
  const axis = options.axis ?? 'all';
  const y = tape.run1(sumSpec, [x.value], { axis });
  return tape.record(y, [x], (dy) => [broadcastTo(tape, tape.reshape(dy, keptShape(x, axis)), x.shape)], []);
}

/** Mean over the last axis or everything. */
export function mean(tape: Tape, x: Variable, options: ReduceOptions = {}): Variable {
  const axis = options.axis ?? 'all';
  const n = axis === 'all' ? x.size : x.shape[x.shape.length - 1]!;
  const total = tape.run1(sumSpec, [x.value], { axis });
  const y = tape.run1(scale, [total], { alpha: 1 / n });
  return tape.record(
    y,
    [x],
    (dy) => {
      const spread = broadcastTo(tape, tape.reshape(dy, keptShape(x, axis)), x.shape);
      return [tape.run1(scale, [spread], { alpha: 1 / n })];
    },
    [],
  );
}

/** Sum of squares over the last axis or everything. */
export function sumSquares(tape: Tape, x: Variable, options: ReduceOptions = {}): Variable {
  const axis = options.axis ?? 'all';
  const y = tape.run1(sumSquaresSpec, [x.value], { axis });
  return tape.record(
    y,
    [x],
    (dy) => {
      // d/dx Σ x² = 2x, times dy broadcast over the reduced axis.
      const xdy = tape.run1(mul, [x.value, tape.reshape(dy, keptShape(x, axis))]);
      return [tape.run1(scale, [xdy], { alpha: 2 })];
    },
    [x.value],
  );
}
