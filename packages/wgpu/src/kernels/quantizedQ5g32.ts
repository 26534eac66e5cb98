import { evenOddTerm, type StreamWord } from './quantizedStreamWord.js';

// q5g32's and q5g32a's codes in WGSL (core's quant/layout.ts has the bits): a
// row's nibbles lie where q4g32's do, and its high bits after them, a word
// per group arranged as q5k's sub-blocks' (so q5k_even and q5k_odd of
// quantizedQ5k.ts give their codes); the scales (and offsets) are q4g32's
// (and q4g32a's). The shaders that read them (quantized.ts,
// quantizedEmbedding.ts) take their q5g32 parts from here.

/**
 * WGSL for the streaming shader (vec4<u32> words; lane c of a tile reads
 * chunk c, one group): its nibbles are vec4 c of the row (whose vec4s are
 * rowWords / 4), its high word component c mod 4 of vec4 G + c / 4.
 */
export const Q5G32_STREAM_FUNCTIONS = `fn word_of(row: u32, chunks: u32, c: u32) -> vec4<u32> {
  if (c >= chunks) { return vec4<u32>(0u); }
  return packed[row * (params.rowWords / 4u) + c];
}
fn high_of(row: u32, chunks: u32, c: u32) -> u32 {
  if (c >= chunks) { return 0u; }
  return packed[row * (params.rowWords / 4u) + chunks + c / 4u][c % 4u];
}`;

/** The streaming shader's word (quantizedStreamWord.ts): q5k's codes, less `centre` (q5g32's 16). */
export function q5g32StreamWord(centre: number): StreamWord {
  const less = centre ? ` - vec4<f32>(${centre}.0)` : '';
  return {
    units: 2,
    part: 'f32',
    codes: (c) => `let h = hv${c} >> (j * 2u);
          let even = q5k_even(wv${c}[j], h)${less};
          let odd = q5k_odd(wv${c}[j], h)${less};`,
    term: evenOddTerm,
  };
}

/**
 * WGSL for the tiled shader (u32 words): invocation `quarter` of column wRow
 * stages 8 codes of the 32-k step at k0, group g = k0 / 32: nibble word 4g +
 * quarter with high word 4G + g shifted by 2 · quarter, as ws[k][n]
 * (f32((q − centre) · s), less the offset where `offset` gives it).
 */
export function q5g32StageTile(
  store: (k: string, value: string) => string,
  centre: number,
  offset: string,
): string {
  const less = centre ? ` - vec4<f32>(${centre}.0)` : '';
  return `let g = k0 / 32u;
    let base = wRow * params.rowWords;
    let low = packed[base + g * 4u + quarter];
    let high = packed[base + params.groups * 4u + g] >> (quarter * 2u);
    let s = scale_of(wRow * params.groups + g);
    let even = (q5k_even(low, high)${less}) * s${offset};
    let odd = (q5k_odd(low, high)${less}) * s${offset};
    for (var j = 0u; j < 4u; j++) {
      ${store('quarter * 8u + 2u * j', 'even[j]')}
      ${store('quarter * 8u + 2u * j + 1u', 'odd[j]')}
    }`;
}

/**
 * WGSL for the gather: `word` and `shift` of element `col`'s nibble and
 * `high`, its high bit (at 8 · ((e mod 8) / 2) + 2 · ((e / 8) mod 4) + e mod
 * 2 of high word 4G + col / 32, e = col mod 32); the code is q5k's
 * (Q5K_GATHER_CODE).
 */
export const Q5G32_GATHER_WORD = `let e = col % 32u;
  let word = packed[row * params.rowWords + col / 8u];
  let shift = (col % 8u) * 4u;
  let high = (packed[row * params.rowWords + params.groups * 4u + col / 32u] >> (((e & 6u) << 2u) + ((e >> 2u) & 6u) + (e & 1u))) & 1u;`;
