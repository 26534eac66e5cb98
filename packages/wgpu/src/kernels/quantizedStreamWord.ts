// One 16-byte code word of the streaming quantized shader (quantized.ts),
// as each format reads it. The shader's loop takes a lane's word j (0 … 3:
// its u32 words) once for x and then for each of its columns: x's units of
// word j are loaded once into xa{r} (and xb{r}) for every row r and reused
// by every column, whose codes come from its own wv{c} (and hv{c}, z{c}).
// The formats with high bits (q5k, q5g32, q6k) build theirs in their own
// files; the plain 4- and 8-bit words are here.

/** What a format's word j gives the shader's loop. */
export interface StreamWord {
  /** x units per u32 word: 2 (8 weights of 4 bits and more, xa and xb) or 1 (4 int8 codes, xa). */
  readonly units: 1 | 2;
  /** The part's type: f32, or vec2<f32> for q6k's two 16-weight sub-blocks. */
  readonly part: 'f32' | 'vec2<f32>';
  /** WGSL lines: column c's codes of u32 word j as local lets. */
  codes(c: number): string;
  /** WGSL: what those codes add to the part of row r, against xa{r} (and xb{r}). */
  term(r: number): string;
}

/** x's even and odd weights of word j for codes formed through byte masks (q5k, q5g32, q6k). */
export const evenOddTerm = (r: number) =>
  `dot(even, vec4<f32>(xa${r}.x, xa${r}.z, xb${r}.x, xb${r}.z)) + dot(odd, vec4<f32>(xa${r}.y, xa${r}.w, xb${r}.y, xb${r}.w))`;

/** Nibbles less the group's zero (q4g32, q4g128, q4g32a, q4k): codes_lo has 0–3, codes_hi 4–7. */
export const NIBBLE_WORD: StreamWord = {
  units: 2,
  part: 'f32',
  codes: (c) => `let lo = codes_lo(wv${c}[j], z${c});
          let hi = codes_hi(wv${c}[j], z${c});`,
  term: (r) => `dot(lo, xa${r}) + dot(hi, xb${r})`,
};

/** Four signed bytes (q8, q8g32, q8g16, q8g32a). */
export const BYTE_WORD: StreamWord = {
  units: 1,
  part: 'f32',
  codes: (c) => `let lo = codes_lo(wv${c}[j]);`,
  term: (r) => `dot(lo, xa${r})`,
};
