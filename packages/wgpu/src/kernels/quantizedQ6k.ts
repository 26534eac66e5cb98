import { evenOddTerm, type StreamWord } from './quantizedStreamWord.js';

// q6k's codes and scales in WGSL (core's quant/layout.ts has the bits): a
// nibble word and its high word give eight whole 6-bit codes through byte
// masks, as ggml's own kernels form them; an int8 sub-block scale (a byte of
// the `zeros` binding) and the super-block's d give f32(d · sc), as ggml
// rounds it. The shaders that read q6k (quantized.ts, quantizedEmbedding.ts)
// take their q6k parts from here.

/**
 * WGSL: the codes less 32 of nibble word `low` (weights 8i … 8i + 7 of a
 * super-block) with `high`, its pair's high word shifted right by 4 for the
 * pair's second word: weights 0, 2, 4, 6 (q6k_even) and 1, 3, 5, 7 (q6k_odd).
 */
export const Q6K_CODES = `fn q6k_bytes(w: u32) -> vec4<f32> {
  return vec4<f32>((vec4<u32>(w) >> vec4<u32>(0u, 8u, 16u, 24u)) & vec4<u32>(255u)) - vec4<f32>(32.0);
}
fn q6k_even(low: u32, high: u32) -> vec4<f32> {
  return q6k_bytes((low & 0x0f0f0f0fu) | ((high << 4u) & 0x30303030u));
}
fn q6k_odd(low: u32, high: u32) -> vec4<f32> {
  return q6k_bytes(((low >> 4u) & 0x0f0f0f0fu) | ((high << 2u) & 0x30303030u));
}`;

/**
 * WGSL: f32(d · sc) of sub-block j (0 … 15) of super-block g of `row`, d read
 * by `scaleOf` (the shader's own reader of the scales as stored, given the
 * index's expression).
 */
export function q6kScaleFunction(scaleOf: (index: string) => string): string {
  return `fn q6k_scale(row: u32, g: u32, j: u32) -> f32 {
  let word = zeros[row * params.zeroWords + g * 4u + j / 4u];
  let sc = bitcast<i32>(word << (24u - 8u * (j & 3u))) >> 24u;
  return ${scaleOf('row * params.groups + g')} * f32(sc);
}`;
}

/**
 * WGSL for the streaming shader (vec4<u32> words; lane c of a tile reads
 * chunk c, 32 weights): chunk c is nibble vec4 c mod 8 of super-block c / 8
 * (12 vec4s: 8 of nibbles, then 4 of high words), its high pairs the half
 * c mod 2 of vec4 8 + (c mod 8) / 2; its two sub-blocks' scales as a vec2.
 */
export const Q6K_STREAM_FUNCTIONS = `fn q6k_at(row: u32, c: u32) -> u32 { return row * (params.rowWords / 4u) + (c / 8u) * 12u; }
fn word_of(row: u32, chunks: u32, c: u32) -> vec4<u32> {
  if (c >= chunks) { return vec4<u32>(0u); }
  return packed[q6k_at(row, c) + c % 8u];
}
fn high_of(row: u32, chunks: u32, c: u32) -> vec2<u32> {
  if (c >= chunks) { return vec2<u32>(0u); }
  let h = packed[q6k_at(row, c) + 8u + (c % 8u) / 2u];
  return select(h.xy, h.zw, (c & 1u) == 1u);
}
fn group_scale(row: u32, chunks: u32, c: u32) -> vec2<f32> {
  let last = min(c, chunks - 1u);
  let g = last / 8u;
  // Sub-blocks 2j and 2j + 1 (j = last mod 8): half j mod 2 of zeros word j / 2, one read.
  let word = zeros[row * params.zeroWords + g * 4u + (last % 8u) / 2u] >> ((last & 1u) * 16u);
  let d = scale_of(row * params.groups + g);
  return vec2<f32>(d * f32(bitcast<i32>(word << 24u) >> 24u), d * f32(bitcast<i32>(word << 16u) >> 24u));
}`;

/**
 * The streaming shader's word (quantizedStreamWord.ts): u32 words 0–1 are
 * the chunk's first sub-block, 2–3 its second, summed into part.x and .y.
 */
export const Q6K_STREAM_WORD: StreamWord = {
  units: 2,
  part: 'vec2<f32>',
  codes: (c) => `let h = select(hv${c}.x, hv${c}.y, j >= 2u) >> ((j & 1u) * 4u);
          let even = q6k_even(wv${c}[j], h);
          let odd = q6k_odd(wv${c}[j], h);
          let half = select(vec2<f32>(1.0, 0.0), vec2<f32>(0.0, 1.0), j >= 2u);`,
  term: (r) => `half * (${evenOddTerm(r)})`,
};

/**
 * WGSL for the tiled shader (u32 words): invocation `quarter` of column wRow
 * stages 8 codes of the 32-k step at k0, chunk c = (k0 / 32) mod 8 of
 * super-block g: nibble word 4c + quarter, the high word 32 + 2c + quarter / 2,
 * sub-block 2c + quarter / 2, as ws[k][n] (f32(f32(d · sc) · (q − 32))).
 */
export function q6kStageTile(store: (k: string, value: string) => string): string {
  return `let g = k0 / 256u;
    let c = (k0 / 32u) % 8u;
    let base = wRow * params.rowWords + g * 48u;
    let low = packed[base + c * 4u + quarter];
    let high = packed[base + 32u + c * 2u + quarter / 2u] >> ((quarter & 1u) * 4u);
    let s = q6k_scale(wRow, g, c * 2u + quarter / 2u);
    let even = q6k_even(low, high) * s;
    let odd = q6k_odd(low, high) * s;
    for (var j = 0u; j < 4u; j++) {
      ${store('quarter * 8u + 2u * j', 'even[j]')}
      ${store('quarter * 8u + 2u * j + 1u', 'odd[j]')}
    }`;
}

/**
 * WGSL for the gather of element i: `value`, element `col` of row `id` as
 * ggml forms it, f32(f32(d · sc) · (q − 32)), from weight e of its
 * super-block: its nibble and its high pair (byte (e mod 8) / 2 of high word
 * e / 16, bit 2 · (2 · ((e / 8) mod 2) + e mod 2)); an id past the table runs
 * `nan` instead. Rows count from the first the dispatch binds (`rowStart`),
 * ids from `idBase`, as the other formats' gathers do.
 */
export const q6kLookup = (nan: string) => `  let id = bitcast<u32>(ids[params.idBase + i / params.dim]);
  if (id >= params.vocab) {
    ${nan};
  }
  let col = i % params.dim;
  // The row within the bound piece of the table.
  let row = id - params.rowStart;
  let g = col / 256u;
  let e = col % 256u;
  let base = row * params.rowWords + g * 48u;
  let nibble = (packed[base + e / 8u] >> ((e % 8u) * 4u)) & 15u;
  let pairShift = ((e & 6u) << 2u) + ((((e >> 2u) & 2u) | (e & 1u)) << 1u);
  let pair = (packed[base + 32u + e / 16u] >> pairShift) & 3u;
  let value = q6k_scale(row, g, e / 16u) * (f32(nibble | (pair << 4u)) - 32.0);`;
