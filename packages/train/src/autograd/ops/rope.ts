import { rope as ropeSpec } from '@rayo/core';
import type { Tape, Variable } from '../tape.js';

export interface RopeOptions {
  readonly positionOffset?: number;
  readonly theta?: number;
  readonly layout?: 'half' | 'interleaved';
}

/**
 * Rotary position embedding of `x` [seq, heads, headDim]. Its backward is the
 * inverse rotation (a rotation's transpose).
 */
export function rope(tape: Tape, x: Variable, options: RopeOptions = {}): Variable {
  const attrs = { positionOffset: 0, theta: 10000, layout: 'half' as const, ...options };
  const y = tape.run1(ropeSpec, [x.value], { ...attrs, inverse: false });
  return tape.record(y, [x], (dy) => [tape.run1(ropeSpec, [dy], { ...attrs, inverse: true })], []);
}
