import {
  logSoftmaxBackward,
  logSoftmax as logSoftmaxSpec,
  softmaxBackward,
  softmax as softmaxSpec,
} from '@rayo/core';
import type { Tape, Variable } from '../tape.js';

/** Softmax over the last axis. */
export function softmax(tape: Tape, x: Variable): Variable {
  const y = tape.run1(softmaxSpec, [x.value]);
  return tape.record(y, [x], (dy) => [tape.run1(softmaxBackward, [dy, y])], [y]);
}

/** Log-softmax over the last axis. */
export function logSoftmax(tape: Tape, x: Variable): Variable {
  const y = tape.run1(logSoftmaxSpec, [x.value]);
  return tape.record(y, [x], (dy) => [tape.run1(logSoftmaxBackward, [dy, y])], [y]);
}
