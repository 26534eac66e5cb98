import { type QuantFormat, quantLayout } from '@rayo/core';

// The streaming quantized shader (quantized.ts) on int8 activations, as
// core's ACTIVATIONS_ATTR allows and llama.cpp's GEMVs do: each tile's x is
// staged as int8 blocks of 32 (d = max|x| · f32(1/127), q = round-half-even(
// x · 127 / max|x|), core's int8Activations.ts) beside each block's d and
// d · Σq, and a lane sums its word's codes against them with
// dot4I8Packed, four products an instruction, where the f32 path converts
// every code and takes an FMA for each: that path is bound by the ALU at
// about 4 operations a weight. A 4-bit word's low nibbles (w & 0x0f0f0f0f)
// are its weights 0, 2, 4, 6 and its high ones 1, 3, 5, 7, so a 4-bit
// block is staged as its even and its odd x (two vec4<u32> of packed
// bytes); an int8 word's bytes are in order. The codes' zero point and the
// formats' offsets multiply d · Σq, so a block's sum is exactly that of its
// int8 x. A folded norm stages x · normWeight and scales the sums by the
// inverse RMS in the epilogue, as the f32 path does. Only the backend's
// qgemvActivations switch turns it on: with 32 (or 16) of 256 invocations
// quantizing a tile's x, the staging serialises, and decoding on an H200
// measured slower than on f32 x (1B Q4_K step 1.15 → 1.30 ms).

/** The formats whose words the int8 path reads: plain nibbles or bytes (no high bits). */
export function streamsInt8(format: QuantFormat): boolean {
  const bits = quantLayout(format, 1).bits;
  return bits === 4 || bits === 8;
}

const STEP = Math.fround(1 / 127);

/** Workgroup memory of the int8 tiles: packed x (vec4<u32>) and (d, d · Σq) per block, per row. */
export function int8TileSizes(bits: number, rows: number): { packed: number; blocks: number } {
  // A tile is 32 words: 32 blocks of 4-bit codes (two vec4 each), or 16 blocks of int8 codes (one vec4 a word).
  return bits === 4 ? { packed: rows * 64, blocks: rows * 32 } : { packed: rows * 32, blocks: rows * 16 };
}

/**
 * WGSL: invocation tid < blocks-per-tile stages block tid of the tile whose
 * first word is `first`, for every row: xq and xd (see the top); with
 * `norm`, x · normWeight and each row's Σx² into sq{r}.
 */
export function int8Stage(bits: number, rows: readonly number[], norm: boolean, perChunk: number): string {
  const perRow = bits === 4 ? 32 : 16;
  const packedPerRow = bits === 4 ? 64 : 32;
  const quads = Array.from({ length: 8 }, (_, i) => i);
  const row = (r: number) => {
    const load = quads
      .map((i) =>
        norm
          ? `var v${i} = x_quad(xRow${r}, k0 + ${4 * i}u); sq${r} += dot(v${i}, v${i}); v${i} = v${i} * norm_quad(k0 + ${4 * i}u);`
          : `let v${i} = x_quad(xRow${r}, k0 + ${4 * i}u);`,
      )
      .join('\n      ');
    const max = quads.map((i) => `max(max(abs(v${i}.x), abs(v${i}.y)), max(abs(v${i}.z), abs(v${i}.w)))`);
    const ints = quads.map((i) => `let q${i} = vec4<i32>(round(v${i} * inv));`).join(' ');
    const sum = quads.map((i) => `q${i}.x + q${i}.y + q${i}.z + q${i}.w`).join(' + ');
    const stores =
      bits === 4
        ? // Word j of the block is quads 2j and 2j + 1: its even weights are .x, .z of both, its odd .y, .w.
          [
            `xq[${r * packedPerRow}u + tid * 2u] = vec4<u32>(${[0, 1, 2, 3].map((j) => `pack4xI8(vec4<i32>(q${2 * j}.x, q${2 * j}.z, q${2 * j + 1}.x, q${2 * j + 1}.z))`).join(', ')});`,
            `xq[${r * packedPerRow}u + tid * 2u + 1u] = vec4<u32>(${[0, 1, 2, 3].map((j) => `pack4xI8(vec4<i32>(q${2 * j}.y, q${2 * j}.w, q${2 * j + 1}.y, q${2 * j + 1}.w))`).join(', ')});`,
          ]
        : // Two words a block, each four quads in order.
          [0, 1].map(
            (h) =>
              `xq[${r * packedPerRow}u + tid * 2u + ${h}u] = vec4<u32>(${[0, 1, 2, 3].map((j) => `pack4xI8(q${4 * h + j})`).join(', ')});`,
          );
    return `{
      ${load}
      let mx = ${maxOf(max)};
      let d = mx * ${STEP};
      let inv = select(0.0, 127.0 / mx, mx > 0.0);
      ${ints}
      ${stores.join('\n      ')}
      xd[${r * perRow}u + tid] = vec2<f32>(d, d * f32(${sum}));
    }`;
  };
  return `if (tid < ${perRow}u) {
      let k0 = first * ${perChunk}u + tid * 32u;
      ${rows.map(row).join('\n      ')}
    }`;
}

/** WGSL: the largest of the expressions, as a balanced tree of max. */
function maxOf(values: readonly string[]): string {
  if (values.length === 1) return values[0]!;
  const half = Math.ceil(values.length / 2);
  return `max(${maxOf(values.slice(0, half))}, ${maxOf(values.slice(half))})`;
}

/**
 * WGSL: a lane's word of every column against the staged blocks of every
 * row: part{r}_{c} = d · Σ q·x̂q (less the zero point times d · Σq for
 * 4-bit codes), and xsum{r} = d · Σq for the offsets.
 */
export function int8Body(
  bits: number,
  rows: readonly number[],
  columns: readonly number[],
  offsets: boolean,
): string {
  const packedPerRow = bits === 4 ? 64 : 32;
  const perRow = bits === 4 ? 32 : 16;
  const lanes = ['x', 'y', 'z', 'w'];
  const x = rows
    .map((r) =>
      bits === 4
        ? `let xe${r} = xq[${r * packedPerRow}u + lane * 2u]; let xo${r} = xq[${r * packedPerRow}u + lane * 2u + 1u]; let xd${r} = xd[${r * perRow}u + lane];${offsets ? ` let xsum${r} = xd${r}.y;` : ''}`
        : `let xw${r} = xq[${r * packedPerRow}u + lane]; let xd${r} = xd[${r * perRow}u + lane / 2u];${offsets ? ` let xsum${r} = xd${r}.y;` : ''}`,
    )
    .join('\n    ');
  const column = (c: number) => {
    const sums = rows.map((r) => {
      const dots =
        bits === 4
          ? lanes.flatMap((l) => [`dot4I8Packed(lo.${l}, xe${r}.${l})`, `dot4I8Packed(hi.${l}, xo${r}.${l})`])
          : lanes.map((l) => `dot4I8Packed(wv${c}.${l}, xw${r}.${l})`);
      const zero = bits === 4 ? ` - z${c}.x * xd${r}.y` : '';
      return `part${r}_${c} = f32(${dots.join(' + ')}) * xd${r}.x${zero};`;
    });
    return bits === 4
      ? `{
      let lo = wv${c} & vec4<u32>(0x0f0f0f0fu);
      let hi = (wv${c} >> vec4<u32>(4u)) & vec4<u32>(0x0f0f0f0fu);
      ${sums.join('\n      ')}
    }`
      : `{ ${sums.join(' ')} }`;
  };
  return `${x}
    ${columns.map(column).join('\n    ')}`;
}
