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
// inverse RMS in the epilogue, as the f32 path does. Four invocations
// stage each block (a tile's 32 blocks of 4-bit codes take 128 of the 256),
// their maxima meeting through workgroup memory: one invocation a block
// serialised the staging.

/** The formats whose words the int8 path reads: plain nibbles or bytes (no high bits). */
export function streamsInt8(format: QuantFormat): boolean {
  const bits = quantLayout(format, 1).bits;
  return bits === 4 || bits === 8;
}

const STEP = Math.fround(1 / 127);

/** Workgroup memory of the int8 tiles: packed x (vec4<u32>) and each block's parts' Σq (vec4<f32>), per row. */
export function int8TileSizes(bits: number, rows: number): { packed: number; blocks: number } {
  // A tile is 32 words: 32 blocks of 4-bit codes (two vec4 each), or 16 blocks of int8 codes (one vec4 a word).
  return bits === 4 ? { packed: rows * 64, blocks: rows * 32 } : { packed: rows * 32, blocks: rows * 16 };
}

/** Invocations that stage a block: each takes 8 of its 32 x (two vec4), so a tile's blocks stage at once. */
const PARTS = 4;

/** WGSL: the largest component of a vec4<f32>. */
const max4 = (v: string) => `max(max(${v}.x, ${v}.y), max(${v}.z, ${v}.w))`;

/**
 * WGSL: invocation tid < PARTS · blocks-per-tile stages part tid % PARTS of
 * block tid / PARTS of the tile whose first word is `first`, for every row:
 * it loads its 8 x (with `norm`, times normWeight, their squares added to
 * sq{r}) and writes their largest |x| to xt (free until the lanes' sums meet
 * after the last tile); after a barrier it reads its block's four maxima,
 * writes its int8 codes into xq and its Σq (exact in f32) into xs. The body
 * (int8Body) takes d from the same maxima in xt.
 */
export function int8Stage(bits: number, rows: readonly number[], norm: boolean, perChunk: number): string {
  const blocks = bits === 4 ? 32 : 16;
  const packedPerRow = bits === 4 ? 64 : 32;
  const stagers = PARTS * blocks;
  const load = (r: number) =>
    norm
      ? `a${r} = x_quad(xRow${r}, k0); b${r} = x_quad(xRow${r}, k0 + 4u);
      sq${r} += dot(a${r}, a${r}) + dot(b${r}, b${r});
      a${r} = a${r} * norm_quad(k0); b${r} = b${r} * norm_quad(k0 + 4u);
      xt[${r * blocks}u + tid / ${PARTS}u][tid % ${PARTS}u] = max(${max4(`abs(a${r})`)}, ${max4(`abs(b${r})`)});`
      : `a${r} = x_quad(xRow${r}, k0); b${r} = x_quad(xRow${r}, k0 + 4u);
      xt[${r * blocks}u + tid / ${PARTS}u][tid % ${PARTS}u] = max(${max4(`abs(a${r})`)}, ${max4(`abs(b${r})`)});`;
  const packAt = (r: number, word: string) => `xq[${r * packedPerRow}u + ${word}]`;
  const stores = (r: number) =>
    bits === 4
      ? // The block's word p (part p's quads): its even weights are .x, .z of both quads, its odd .y, .w.
        `${packAt(r, `(tid / ${PARTS}u) * 2u`)}[tid % ${PARTS}u] = pack4xI8(vec4<i32>(qa.x, qa.z, qb.x, qb.z));
      ${packAt(r, `(tid / ${PARTS}u) * 2u + 1u`)}[tid % ${PARTS}u] = pack4xI8(vec4<i32>(qa.y, qa.w, qb.y, qb.w));`
      : // Two words a block, each four quads in order: part p's quads are word p / 2's components 2p % 4 and 2p % 4 + 1.
        `${packAt(r, `(tid / ${PARTS}u) * 2u + (tid % ${PARTS}u) / 2u`)}[(tid % 2u) * 2u] = pack4xI8(qa);
      ${packAt(r, `(tid / ${PARTS}u) * 2u + (tid % ${PARTS}u) / 2u`)}[(tid % 2u) * 2u + 1u] = pack4xI8(qb);`;
  const quantize = (r: number) => `{
      let m4 = xt[${r * blocks}u + tid / ${PARTS}u];
      let mx = ${max4('m4')};
      let inv = select(0.0, 127.0 / mx, mx > 0.0);
      let qa = vec4<i32>(round(a${r} * inv));
      let qb = vec4<i32>(round(b${r} * inv));
      ${stores(r)}
      xs[${r * blocks}u + tid / ${PARTS}u][tid % ${PARTS}u] = f32(qa.x + qa.y + qa.z + qa.w + qb.x + qb.y + qb.z + qb.w);
    }`;
  return `${rows.map((r) => `var a${r} = vec4<f32>(0.0); var b${r} = vec4<f32>(0.0);`).join(' ')}
    if (tid < ${stagers}u) {
      let k0 = first * ${perChunk}u + tid * 8u;
      ${rows.map(load).join('\n      ')}
    }
    workgroupBarrier();
    if (tid < ${stagers}u) {
      ${rows.map(quantize).join('\n      ')}
    }`;
}

/**
 * Workgroup memory of a resident x (the whole row staged once, see
 * quantized.ts's `resident`) of `words` code words: packed x (vec4<u32>) and
 * (d, d · Σq) per block (vec2<f32>).
 */
export function residentSizes(bits: number, words: number): { packed: number; blocks: number } {
  return bits === 4 ? { packed: 2 * words, blocks: words } : { packed: words, blocks: words / 2 };
}

/** Bytes of workgroup memory a resident x of `words` code words takes (residentSizes). */
export function residentBytes(bits: number, words: number): number {
  const { packed, blocks } = residentSizes(bits, words);
  return 16 * packed + 8 * blocks;
}

/**
 * WGSL: the whole row of x (row 0) staged as int8 blocks, block b by
 * invocation b % 256 (a block's 32 x loaded at once), every block of
 * `blocks` (zeros past K: x_quad gives 0); with `norm`, x · normWeight and
 * Σx² into sq0.
 */
export function residentStage(bits: number, norm: boolean, blocks: string): string {
  const quads = Array.from({ length: 8 }, (_, i) => i);
  const load = quads
    .map((i) =>
      norm
        ? `var v${i} = x_quad(xRow0, k0 + ${4 * i}u); sq0 += dot(v${i}, v${i}); v${i} = v${i} * norm_quad(k0 + ${4 * i}u);`
        : `let v${i} = x_quad(xRow0, k0 + ${4 * i}u);`,
    )
    .join('\n    ');
  const max = quads.map((i) => max4(`abs(v${i})`));
  const ints = quads.map((i) => `let q${i} = vec4<i32>(round(v${i} * inv));`).join(' ');
  const sum = quads.map((i) => `q${i}.x + q${i}.y + q${i}.z + q${i}.w`).join(' + ');
  // 4-bit: word j of the block is quads 2j and 2j + 1, its even weights .x, .z of both, its odd .y, .w.
  // 8-bit: two words a block, each four quads in order.
  const stores =
    bits === 4
      ? [
          `xq[b * 2u] = vec4<u32>(${[0, 1, 2, 3].map((j) => `pack4xI8(vec4<i32>(q${2 * j}.x, q${2 * j}.z, q${2 * j + 1}.x, q${2 * j + 1}.z))`).join(', ')});`,
          `xq[b * 2u + 1u] = vec4<u32>(${[0, 1, 2, 3].map((j) => `pack4xI8(vec4<i32>(q${2 * j}.y, q${2 * j}.w, q${2 * j + 1}.y, q${2 * j + 1}.w))`).join(', ')});`,
        ]
      : [0, 1].map(
          (h) =>
            `xq[b * 2u + ${h}u] = vec4<u32>(${[0, 1, 2, 3].map((j) => `pack4xI8(q${4 * h + j})`).join(', ')});`,
        );
  return `for (var b = tid; b < ${blocks}; b += ${THREADS}u) {
    let k0 = b * 32u;
    ${load}
    let mx = ${maxOf(max)};
    let d = mx * ${STEP};
    let inv = select(0.0, 127.0 / mx, mx > 0.0);
    ${ints}
    ${stores.join('\n    ')}
    xd[b] = vec2<f32>(d, d * f32(${sum}));
  }`;
}

const THREADS = 256;

/** WGSL: the largest of the expressions, as a balanced tree of max. */
function maxOf(values: readonly string[]): string {
  if (values.length === 1) return values[0]!;
  const half = Math.ceil(values.length / 2);
  return `max(${maxOf(values.slice(0, half))}, ${maxOf(values.slice(half))})`;
}

/** WGSL: xd{r} = (d, d · Σq) of block `at` of the tile (int8Stage), and xsum{r} = d · Σq where the format has offsets. */
function blockScales(r: number, at: string, offsets: boolean): string {
  return `let m${r} = xt[${at}]; let d${r} = ${max4(`m${r}`)} * ${STEP}; let xd${r} = vec2<f32>(d${r}, d${r} * dot(xs[${at}], vec4<f32>(1.0)));${offsets ? ` let xsum${r} = xd${r}.y;` : ''}`;
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
  /** A resident x (row 0 only): the lane's word index in the row, its blocks' (d, d · Σq) in xd. */
  residentWord?: string,
): string {
  const packedPerRow = bits === 4 ? 64 : 32;
  const perRow = bits === 4 ? 32 : 16;
  const lanes = ['x', 'y', 'z', 'w'];
  const w = residentWord;
  const x = rows
    .map((r) =>
      w !== undefined
        ? bits === 4
          ? `let xe${r} = xq[(${w}) * 2u]; let xo${r} = xq[(${w}) * 2u + 1u]; let xd${r} = xd[${w}];${offsets ? ` let xsum${r} = xd${r}.y;` : ''}`
          : `let xw${r} = xq[${w}]; let xd${r} = xd[(${w}) / 2u];${offsets ? ` let xsum${r} = xd${r}.y;` : ''}`
        : bits === 4
          ? `let xe${r} = xq[${r * packedPerRow}u + lane * 2u]; let xo${r} = xq[${r * packedPerRow}u + lane * 2u + 1u]; ${blockScales(r, `${r * perRow}u + lane`, offsets)}`
          : `let xw${r} = xq[${r * packedPerRow}u + lane]; ${blockScales(r, `${r * perRow}u + lane / 2u`, offsets)}`,
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
