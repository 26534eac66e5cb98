import type { Shape } from '@rayo/core';
import type { Tape, Variable } from '../tape.js';

/** The same elements under another shape (row-major), without a copy. */
export function reshape(tape: Tape, x: Variable, shape: Shape): Variable {
  const y = tape.reshape(x.value, shape);
  return tape.record(y, [x], (dy) => [tape.reshape(dy, x.shape)], []);
}
