// q4k's sub-block scales (core's quant/layout.ts): the 6-bit sc and m of
// one of a super-block's eight sub-blocks, read from the file's twelve bytes
// (three words of the `zeros` binding) as ggml's get_scale_min_k4 reads
// them, branch-free. The shaders multiply them by their d and dmin.

/** WGSL: vec2(sc, m) of sub-block j (0 … 7) of the super-block whose words start at zeros[at]. */
export const SUB_BLOCK_SCALE_MIN = `fn sub_block_scale_min(at: u32, j: u32) -> vec2<u32> {
  let shift = (j & 3u) * 8u;
  let b0 = (zeros[at] >> shift) & 0xffu;
  let b1 = (zeros[at + 1u] >> shift) & 0xffu;
  let b2 = (zeros[at + 2u] >> shift) & 0xffu;
  // Sub-blocks 0–3: the low 6 bits of words 0 and 1; 4–7: word 2's nibbles and the top 2 bits of words 0 and 1.
  let high = j >= 4u;
  return vec2<u32>(
    select(b0 & 63u, (b2 & 15u) | ((b0 >> 6u) << 4u), high),
    select(b1 & 63u, (b2 >> 4u) | ((b1 >> 6u) << 4u), high),
  );
}`;

/**
 * WGSL: q4k's eight nibbles of a word, the lowest first (codes_lo 0–3, codes_hi 4–7), as exact f32s without
 * an int-to-float convert (a quarter-rate instruction on NVIDIA GPUs): nibble i masked in place and ORed into
 * the mantissa of 2^23 reads as 2^23 + q · 16^i, and one fma by 16^-i less 2^23 · 16^-i leaves q exactly.
 */
export const Q4K_CODES = `fn codes_lo(w: u32) -> vec4<f32> {
  let m = (vec4<u32>(w) & vec4<u32>(0xfu, 0xf0u, 0xf00u, 0xf000u)) | vec4<u32>(0x4b000000u);
  return fma(
    bitcast<vec4<f32>>(m),
    vec4<f32>(1.0, 0.0625, 0.00390625, 0.000244140625),
    vec4<f32>(-8388608.0, -524288.0, -32768.0, -2048.0),
  );
}
fn codes_hi(w: u32) -> vec4<f32> { return codes_lo(w >> 16u); }`;
