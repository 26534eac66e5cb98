// 4-bit codes as exact f32 without an integer-to-float conversion: masked
// into the low mantissa bits of 2²³ (bits 0x4b000000), nibble q at bit 4j
// is the float 2²³ + q · 16^j; one fma scales it back and takes 2²³ and the
// zero point off, exactly (every value involved fits f32's 24 bits). A
// conversion runs at a quarter of the FMA rate on NVIDIA GPUs; a mask-and-or
// and an fma are full rate (the streaming q4k product on an H200: 12% less
// time). quantizedGemv.ts forms its codes the same way.

/** WGSL: `nibbles_f32(w, less)`: nibbles 0–3 of w (the lowest first) less `less`; nibbles 4–7 are those of w >> 16. */
export const NIBBLES_F32 = `fn nibbles_f32(w: u32, less: vec4<f32>) -> vec4<f32> {
  let bits = (vec4<u32>(w) & vec4<u32>(0xfu, 0xf0u, 0xf00u, 0xf000u)) | vec4<u32>(0x4b000000u);
  return fma(bitcast<vec4<f32>>(bits), vec4<f32>(1.0, 0.0625, 0.00390625, 0.000244140625),
    vec4<f32>(-8388608.0, -524288.0, -32768.0, -2048.0) - less);
}`;
