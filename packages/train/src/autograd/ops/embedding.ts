import { embeddingBackward, embedding as embeddingSpec, type Tensor } from '@rayo/core';
import type { Tape, Variable } from '../tape.js';

/** Rows of `table` [V, D] at `ids` (i32, any shape): [...ids.shape, D]. */
export function embedding(tape: Tape, table: Variable, ids: Tensor): Variable {
  const y = tape.run1(embeddingSpec, [table.value, ids]);
  const vocabSize = table.shape[0]!;
  return tape.record(y, [table], (dy) => [tape.run1(embeddingBackward, [dy, ids], { vocabSize })], [ids]);
}
