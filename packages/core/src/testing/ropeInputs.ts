import type { InputSample, Tolerance } from './cases.js';

// What the cases of every rope-applying kernel share: rope's own, the cache
// writes' and the replays'.

export type RopeLayout = 'half' | 'interleaved';
export const ROPE_LAYOUTS: readonly RopeLayout[] = ['half', 'interleaved'];

/**
 * Every backend computes the angle position · frequency exactly enough that
 * only the f32 rotation's roundings remain (a few ulp of the output), at
 * every position an i32 holds: the bound does not grow with the position.
 * The benchmark checks its rope cases with the same bound.
 */
export function ropeTolerance(maxPosition: number): Required<Tolerance> {
  if (!(maxPosition <= MAX_POSITION)) throw new RangeError(`position ${maxPosition} is past ${MAX_POSITION}`);
  return { rtol: 1e-5, atol: 2e-6 };
}

/** The last position rope takes: positions are i32. */
const MAX_POSITION = 2 ** 31 - 1;

/** [headDim / 2] random frequencies, log-uniform from 1e-5 to 1: a scaled RoPE's table. */
export function frequencyTable(headDim: number): InputSample {
  return {
    shape: [headDim / 2],
    init: (rng, n) => Array.from({ length: n }, () => 10 ** rng.uniform(-5, 0)),
  };
}
