/**
 * Uniform numbers in (lo, hi) from the Park–Miller generator started at
 * `seed`: the cuda tests' inputs, the same sequence on every run so that a
 * failing case replays.
 */
export function seededUniform(seed: number, lo = 0, hi = 1): () => number {
  let state = seed;
  return () => {
    state = (state * 16807) % 2147483647;
    return lo + ((hi - lo) * state) / 2147483647;
  };
}
