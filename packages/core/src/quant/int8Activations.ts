// x as a backend's int8-activation products read it (the cuda backend's
// `qgemvActivations: 'int8'`, after llama.cpp's q8_1): per block of 32
// elements of a row, d = f32(max|x| · f32(1/127)) and q = round-half-even(
// f32(x · f32(127 / max|x|))), each element standing for q · d. The host
// reference those products are checked against.

/** Elements per block of x (one d each). */
export const INT8_ACTIVATION_BLOCK = 32;

/** Rows [m, k] of x as their int8 blocks stand for them (q · d, in f64), and each block's d ([m, ceil(k / 32)]). */
export function int8ActivationBlocks(
  x: ArrayLike<number>,
  m: number,
  k: number,
): { values: Float64Array; d: Float64Array } {
  const blocks = Math.ceil(k / INT8_ACTIVATION_BLOCK);
  const values = new Float64Array(m * k);
  const d = new Float64Array(m * blocks);
  const step = Math.fround(1 / 127);
  for (let r = 0; r < m; r++) {
    for (let b = 0; b < blocks; b++) {
      const first = b * INT8_ACTIVATION_BLOCK;
      const end = Math.min(k, first + INT8_ACTIVATION_BLOCK);
      let max = 0;
      for (let i = first; i < end; i++) max = Math.max(max, Math.abs(x[r * k + i]!));
      const scale = Math.fround(max * step);
      const inverse = max === 0 ? 0 : Math.fround(127 / max);
      d[r * blocks + b] = scale;
      for (let i = first; i < end; i++)
        values[r * k + i] = roundHalfEven(Math.fround(x[r * k + i]! * inverse)) * scale;
    }
  }
  return { values, d };
}

/** Round half to even, as PTX's cvt.rni does. */
function roundHalfEven(v: number): number {
  const r = Math.round(v);
  return Math.abs(v - Math.trunc(v)) === 0.5 && r % 2 !== 0 ? r - 1 : r;
}
