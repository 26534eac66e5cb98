import { evenOddTerm, type StreamWord } from './quantizedStreamWord.js';

// q5k's codes in WGSL (core's quant/layout.ts has the bits): a nibble word
// and its sub-block's high word, shifted right by 2 · (the nibble word's
// place in the sub-block), give four whole 5-bit codes per byte mask, as
// q6k's high pairs do (quantizedQ6k.ts); its scales and offsets are q4k's
// (quantizedSubBlocks.ts). The shaders that read q5k (quantized.ts,
// quantizedEmbedding.ts) take their q5k parts from here.

/** WGSL: the codes of nibble word `low` with `high` shifted as above: weights 0, 2, 4, 6 (q5k_even) and 1, 3, 5, 7 (q5k_odd). */
export const Q5K_CODES = `fn q5k_bytes(w: u32) -> vec4<f32> {
  return vec4<f32>((vec4<u32>(w) >> vec4<u32>(0u, 8u, 16u, 24u)) & vec4<u32>(255u));
}
fn q5k_even(low: u32, high: u32) -> vec4<f32> {
  return q5k_bytes((low & 0x0f0f0f0fu) | ((high << 4u) & 0x10101010u));
}
fn q5k_odd(low: u32, high: u32) -> vec4<f32> {
  return q5k_bytes(((low >> 4u) & 0x0f0f0f0fu) | ((high << 3u) & 0x10101010u));
}`;

/**
 * WGSL for the streaming shader (vec4<u32> words; lane c of a tile reads
 * chunk c, 32 weights, one sub-block): chunk c is nibble vec4 c mod 8 of
 * super-block c / 8 (10 vec4s: 8 of nibbles, then 2 of high words), its high
 * word component c mod 4 of vec4 8 + (c mod 8) / 4.
 */
export const Q5K_STREAM_FUNCTIONS = `fn q5k_at(row: u32, c: u32) -> u32 { return row * (params.rowWords / 4u) + (c / 8u) * 10u; }
fn word_of(row: u32, chunks: u32, c: u32) -> vec4<u32> {
  if (c >= chunks) { return vec4<u32>(0u); }
  return packed[q5k_at(row, c) + c % 8u];
}
fn high_of(row: u32, chunks: u32, c: u32) -> u32 {
  if (c >= chunks) { return 0u; }
  return packed[q5k_at(row, c) + 8u + (c % 8u) / 4u][c % 4u];
}`;

/** The streaming shader's word (quantizedStreamWord.ts): nibbles with their sub-block's high bits. */
export const Q5K_STREAM_WORD: StreamWord = {
  units: 2,
  part: 'f32',
  codes: (c) => `let h = hv${c} >> (j * 2u);
          let even = q5k_even(wv${c}[j], h);
          let odd = q5k_odd(wv${c}[j], h);`,
  term: evenOddTerm,
};

/**
 * WGSL for the tiled shader (u32 words): invocation `quarter` of column wRow
 * stages 8 codes of the 32-k step at k0, sub-block c = (k0 / 32) mod 8 of
 * super-block g: nibble word 4c + quarter with high word 32 + c shifted by
 * 2 · quarter, as ws[k][n] (f32(q · f32(d · sc)) − f32(dmin · m)).
 */
export function q5kStageTile(store: (k: string, value: string) => string): string {
  return `let g = k0 / 256u;
    let c = (k0 / 32u) % 8u;
    let base = wRow * params.rowWords + g * 40u;
    let low = packed[base + c * 4u + quarter];
    let high = packed[base + 32u + c] >> (quarter * 2u);
    let sb = sub_block(wRow, g, c);
    let even = q5k_even(low, high) * sb.x - vec4<f32>(sb.y);
    let odd = q5k_odd(low, high) * sb.x - vec4<f32>(sb.y);
    for (var j = 0u; j < 4u; j++) {
      ${store('quarter * 8u + 2u * j', 'even[j]')}
      ${store('quarter * 8u + 2u * j + 1u', 'odd[j]')}
    }`;
}

/**
 * WGSL for the gather: `word` and `shift` of element `col`'s nibble (weight
 * e of super-block col / 256) and `high`, its high bit (at 8 · ((e mod 8) /
 * 2) + 2 · ((e / 8) mod 4) + e mod 2 of high word e / 32); the code is
 * the nibble | high << 4.
 */
export const Q5K_GATHER_WORD = `let e = col % 256u;
  let base = row * params.rowWords + (col / 256u) * 40u;
  let word = packed[base + e / 8u];
  let shift = (e % 8u) * 4u;
  let high = (packed[base + 32u + e / 32u] >> (((e & 6u) << 2u) + ((e >> 2u) & 6u) + (e & 1u))) & 1u;`;
export const Q5K_GATHER_CODE = 'f32(((word >> shift) & 15u) | (high << 4u))';
