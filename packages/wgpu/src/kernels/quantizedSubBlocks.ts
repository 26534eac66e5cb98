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
