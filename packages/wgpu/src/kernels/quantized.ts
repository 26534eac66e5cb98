import {
  FLOAT,
  InvalidArgumentError,
  isQgemvFormat,
  type QuantActivations,
  type QuantFormat,
  quantizedMatmul,
  quantLayout,
  takesInt8Activations,
} from '@rayo/core';
import {
  type AnyWgpuKernel,
  gridFor,
  type KernelEncoder,
  linearWorkgroup,
  type Operand,
  wgpuKernel,
} from '../kernel.js';
import { paramLayout } from '../params.js';
import { type ProductPiece, productPieces } from '../rowPieces.js';
import type { QuantColumns } from '../tuning.js';
import { ACTIVATION_FUNCTIONS_WGSL, activationWgsl } from '../wgsl/activations.js';
import { NIBBLES_F32 } from '../wgsl/codeFloats.js';
import { GROUP_SUMS_END, groupSumsOrElse, SUBGROUP_BUILTINS } from '../wgsl/groupSums.js';
import { storageOf } from '../wgsl/half.js';
import { ShaderModule, type WgslType } from '../wgsl/module.js';
import { encodeWithF32Activations } from './halfEdges.js';
import { normedF32 } from './normalization.js';
import { encodeQuantizedGemvF32 } from './quantizedGemv.js';
import { QUANT_WEIGHT_PARAMS, SCALE_KINDS } from './quantizedParams.js';
import { Q5G32_STREAM_FUNCTIONS, q5g32StageTile, q5g32StreamWord } from './quantizedQ5g32.js';
import { Q5K_CODES, Q5K_STREAM_FUNCTIONS, Q5K_STREAM_WORD, q5kStageTile } from './quantizedQ5k.js';
import {
  Q6K_CODES,
  Q6K_STREAM_FUNCTIONS,
  Q6K_STREAM_WORD,
  q6kScaleFunction,
  q6kStageTile,
} from './quantizedQ6k.js';
import {
  int8Body,
  int8Stage,
  int8TileSizes,
  residentBytes,
  residentSizes,
  residentStage,
  streamsInt8,
} from './quantizedStreamInt8.js';
import { BYTE_WORD, NIBBLE_WORD } from './quantizedStreamWord.js';
import { SUB_BLOCK_SCALE_MIN } from './quantizedSubBlocks.js';

// quantizedMatmul: y = x · dequant(W)ᵀ (+ beta · c) with W [N, K] stored as
// int8 or 4-bit codes (core's quant/layout.ts has the bits). For a few rows
// of x (decoding), a workgroup is 8 groups of 32 invocations; group g owns
// 1, 2 or 4 adjacent output columns (more where N leaves enough workgroups:
// each x value read from the tile then serves every column) and its lanes
// read each row's 16-byte words (16 int8 or 32 nibbles each) as vec4<u32>,
// dequantize them in registers and sum against x (staged per tile in
// workgroup memory) in vec4 dot products; group-scaled formats sum each word
// before its group scale multiplies it (q4g32a and q8g32a also sum the word's x, which the offset multiplies;
// q4k likewise, its word's scale d·sc and offset dmin·m formed from the super-block's d, dmin and 6-bit
// sub-block scales, and q5k as q4k with its sub-block's word of high bits, see quantizedQ5k.ts, q5g32 and
// q5g32a as q4g32 and q4g32a with their group's, see quantizedQ5g32.ts;
// q6k's lanes read their word's high pairs too and sum its two 16-weight sub-blocks apart,
// see quantizedQ6k.ts), q8 scales the row's sum once. The lanes' sums meet in a
// tree in workgroup memory (no subgroups needed). More rows take a tiled
// shader: a 64-column × 32-k tile of W is dequantized into workgroup memory
// per step, and each invocation computes 4 × 4 outputs of a 64 × 64 tile.
// x, c and y are f32 in the shaders (half ones go through f32 scratch, see
// halfEdges.ts); the scales are read as stored.

const THREADS = 256;
const LANES = 32;
const GROUPS = THREADS / LANES;
/** The most rows of x the streaming shader takes; more go to the tiled one. */
export const QUANT_STREAM_MAX_ROWS = 4;
const TILE = 64;
const TILE_K = 32;

const PARAMS = paramLayout([
  ...QUANT_WEIGHT_PARAMS,
  /** Workgroups that do work (the rest of a `gridFor` grid return at once). */
  ['tiles', 'u32'],
  /** A resident x's column sets per workgroup (see `resident`). */
  ['sets', 'u32'],
  ['tilesN', 'u32'],
  /** A folded norm's eps (the streaming shader's `norm`). */
  ['eps', 'f32'],
] as const);

/**
 * What a shader is compiled for. Zero points, c and the scales' storage are
 * uniform parameters instead: each would multiply the shaders to compile
 * (seconds each on a software Vulkan), and their branches are uniform.
 */
export interface QuantShaderVariant {
  readonly format: QuantFormat;
}

export interface QuantStreamVariant extends QuantShaderVariant {
  /** Rows of x per workgroup: 1 (decoding) or QUANT_STREAM_MAX_ROWS, rows past M clamped. */
  readonly rows: number;
  /** x read as vec4<f32>: K a multiple of 32 and x 16-byte aligned; else element by element up to K. */
  readonly vecX: boolean;
  /**
   * An rmsNorm folded in (`normWeight`, f32, bound after y): x · normWeight
   * is staged instead of x, its stagers sum x², and each row's sums are
   * scaled by 1 / sqrt(mean(x²) + eps) as they are stored.
   */
  readonly norm: boolean;
  /**
   * The norm's weights read as vec4<f32> (with `vecX`, the weight 16-byte aligned): a stager's quad is
   * one load, where four clamped scalar ones took Llama-3.1-8B's normed Q4_K gate·up from 36.9 to
   * 39.8 µs on an H200.
   */
  readonly vecNorm?: boolean;
  /** Sum each column's lanes by subgroup shuffles where subgroups of at least 32 run in order (groupSums.ts). */
  readonly subgroups: boolean;
  /** Adjacent columns each group of 32 invocations takes (QUANT_COLUMN_CHOICES): x read from the tile once for all. */
  readonly cols: QuantColumns;
  /** x staged as int8 blocks and summed by dot4I8Packed (quantizedStreamInt8.ts): 4- and 8-bit codes only. */
  readonly int8: boolean;
  /**
   * A gate·up pair in one pass (cols 2 or 4, P = cols / 2 rows of each weight a group):
   * group g's columns 0 … P − 1 are rows gP … gP + P − 1 of the gate's weight, columns
   * P … 2P − 1 the same rows of the up weight (bound after the gate's as packed_u, …),
   * and y = silu(gate) · up; no c.
   */
  readonly pair?: boolean;
  /** The up product of a gate·up pair: y = silu(c) · (x · Wᵀ), c the gate's product (quantizedGateUpParts.ts). */
  readonly gated?: boolean;
  /**
   * One row of int8 x staged whole, once, in workgroup memory of this many code words (a power of two at
   * least the row's, residentSizes): the groups then stream their columns' words with no barrier between
   * tiles, each workgroup taking `sets` column sets in turn (quantizedStreamInt8.ts).
   */
  readonly resident?: number;
}

/**
 * Workgroups the streaming shader keeps at least when it gives each group
 * more than one column: with fewer, SMs idle.
 */
const MIN_WORKGROUPS_PER_COLUMNS = 256;

/**
 * Columns per group of the streaming shader: the tuning switch where set,
 * else the most that leave MIN_WORKGROUPS_PER_COLUMNS workgroups for the `n`
 * columns, of 4 and 2 for codes of 5 bits and more and of 2 for 4-bit codes
 * (on an H200, 4 columns of Q4_K took 12% longer than 2 on Llama-3.1-8B's
 * products; int8's gained from 4). One column a group reads x from the tile
 * once per column and word: eight times the weight's bytes for 4-bit codes.
 */
export function quantColumnsFor(n: number, bits: number, forced: QuantColumns | undefined): QuantColumns {
  if (forced !== undefined) return forced;
  const choices = bits === 4 ? ([2] as const) : ([4, 2] as const);
  for (const c of choices) if (Math.ceil(n / (GROUPS * c)) >= MIN_WORKGROUPS_PER_COLUMNS) return c;
  return 1;
}

/** The most workgroups a resident x's product launches: more columns go to later column sets. */
const MAX_RESIDENT_WORKGROUPS = 1024;

/**
 * The shortest rows whose one-row int8 products stage x whole by default:
 * on an H200 that took Llama-3.1-8B's Q4_K down product (K 14,336) from 26.2
 * to 21.8 µs in decoding and Llama-3.2-1B's (K 8,192) from 13.6 to 12.0,
 * while rows of 2,048 and 4,096 with a folded norm (q·k·v, gate·up) ran
 * slower: their workgroups' first words then wait for the whole row's
 * staging and the norm's sums.
 */
const RESIDENT_MIN_K = 8192;

/**
 * The code words a resident x holds for rows of `rowWords` 16-byte code
 * words (a power of two at least the row's, in whole tiles), or undefined
 * (tile-by-tile staging): the switch decides where set, else rows of at
 * least RESIDENT_MIN_K weights without a folded norm take it; either way
 * only where it fits the device's workgroup memory beside the sums' scratch.
 */
export function residentWordsFor(
  encoder: KernelEncoder,
  bits: number,
  rowWords: number,
  shape: { readonly k: number; readonly norm: boolean },
): number | undefined {
  const forced = encoder.tuning.quantResident;
  if (forced === 'off' || (forced === undefined && (shape.norm || shape.k < RESIDENT_MIN_K)))
    return undefined;
  const words = 2 ** Math.ceil(Math.log2(Math.max(LANES, Math.ceil(rowWords / LANES) * LANES)));
  const scratch = THREADS * 4;
  return residentBytes(bits, words) + scratch <= encoder.limits.maxComputeWorkgroupStorageSize
    ? words
    : undefined;
}

/** Module-scope WGSL: the codes of a word as exact f32, a scale, a group's zero point and offset. */
function dequantFunctions(v: QuantShaderVariant): string {
  const layout = quantLayout(v.format, 1);
  const bits = layout.bits;
  const codes =
    bits === 8
      ? // Four signed bytes: each shifted to the top of an i32, then arithmetic-shifted back (through
        // the mantissa of 2²³ as the nibbles below, these products measured 5% slower on an H200).
        `fn codes_lo(w: u32) -> vec4<f32> {
  return vec4<f32>((vec4<i32>(bitcast<i32>(w)) << vec4<u32>(24u, 16u, 8u, 0u)) >> vec4<u32>(24u));
}`
      : // Eight nibbles less the zero point z, the lowest first: codes_lo has 0–3, codes_hi 4–7.
        `${NIBBLES_F32}
fn codes_lo(w: u32, z: vec4<f32>) -> vec4<f32> { return nibbles_f32(w, z); }
fn codes_hi(w: u32, z: vec4<f32>) -> vec4<f32> { return nibbles_f32(w >> 16u, z); }`;
  // Only q4g32 and q4g128 have zero points (and a binding for them); q4g32a's codes are unsigned.
  const zero = layout.zeroPoints
    ? `fn zero_of(row: u32, g: u32) -> f32 {
  if (params.hasZeros == 0u) { return 8.0; }
  return f32((zeros[row * params.zeroWords + (g >> 3u)] >> ((g & 7u) * 4u)) & 15u);
}`
    : bits === 4
      ? `fn zero_of(row: u32, g: u32) -> f32 { return ${layout.offset}.0; }`
      : '';
  const offset = layout.offsets
    ? `fn offset_of(i: u32) -> f32 { return float_of(offsets[i >> select(1u, 0u, params.scaleKind == 0u)], i); }`
    : '';
  // q4k: vec2(f32(d · sc), f32(dmin · m)) of sub-block j of super-block g, as ggml rounds them.
  const subBlock =
    layout.bits === 6
      ? `${Q6K_CODES}\n${q6kScaleFunction((i) => `scale_of(${i})`)}`
      : layout.subBlockScales
        ? `${layout.bits === 5 ? `${Q5K_CODES}\n` : ''}${SUB_BLOCK_SCALE_MIN}
fn sub_block(row: u32, g: u32, j: u32) -> vec2<f32> {
  let sm = sub_block_scale_min(row * params.zeroWords + g * 3u, j);
  let i = row * params.groups + g;
  return vec2<f32>(scale_of(i) * f32(sm.x), offset_of(i) * f32(sm.y));
}`
        : layout.bits === 5
          ? Q5K_CODES
          : '';
  return `${codes}
${zero}
// Element i of a float array stored as u32 words: f32, or a half of a word (f16, bf16).
fn float_of(word: u32, i: u32) -> f32 {
  if (params.scaleKind == 0u) { return bitcast<f32>(word); }
  let half = (word >> ((i & 1u) * 16u)) & 0xffffu;
  if (params.scaleKind == 1u) { return unpack2x16float(half).x; }
  return bitcast<f32>(half << 16u);
}
fn scale_of(i: u32) -> f32 { return float_of(scales[i >> select(1u, 0u, params.scaleKind == 0u)], i); }
${offset}${subBlock ? `\n${subBlock}` : ''}`;
}

/** What the up weight's bindings and functions of a gate·up pair shader end in (upWeightFunctions). */
const UP_SUFFIX = '_u';
const WEIGHT_BUFFERS = ['packed', 'scales', 'zeros', 'offsets'];

/**
 * The up weight's copy of WGSL functions that read the weight buffers: every
 * function declared in `code` and every buffer renamed with UP_SUFFIX (WGSL
 * passes no storage buffers to functions).
 */
export function upWeightFunctions(code: string): string {
  const names = [...code.matchAll(/\bfn (\w+)\(/g)].map((m) => m[1]!);
  let out = code;
  for (const name of names) out = out.replace(new RegExp(`\\b${name}\\(`, 'g'), `${name}${UP_SUFFIX}(`);
  for (const buffer of WEIGHT_BUFFERS) {
    out = out.replace(new RegExp(`\\b${buffer}\\[`, 'g'), `${buffer}${UP_SUFFIX}[`);
  }
  return out;
}

/**
 * Declares the params, then the bindings in dispatch order: x, packed, scales, zeros (q4g32, q4g128; q4k's
 * sub-block scales), offsets (q4g32a, q8g32a, q4k) — with `pair`, the up weight's four after them and no
 * c —, c, y, and a folded norm's weight where `normType` (its binding type) is given.
 */
function declareBindings(
  module: ShaderModule,
  v: QuantShaderVariant,
  xType: WgslType,
  packedType: WgslType,
  normType: WgslType | undefined = undefined,
  pair = false,
): void {
  const layout = quantLayout(v.format, 1);
  module.params(PARAMS);
  module.storage('x', xType, 'read');
  for (const suffix of pair ? ['', UP_SUFFIX] : ['']) {
    module.storage(`packed${suffix}`, packedType, 'read');
    module.storage(`scales${suffix}`, 'u32', 'read');
    if (layout.zeroPoints || layout.subBlockScales) module.storage(`zeros${suffix}`, 'u32', 'read');
    if (layout.offsets) module.storage(`offsets${suffix}`, 'u32', 'read');
  }
  if (!pair) module.storage('c', 'f32', 'read');
  module.storage('y', 'f32', 'read_write');
  if (normType) module.storage('normWeight', normType, 'read');
}

/**
 * WGSL: y[row, col] = value (+ beta · c[row, col]), col counted from this
 * dispatch's first column; `gated`, y = silu(c[row, col]) · value (c the gate's product).
 */
function storeY(row: string, col: string, value: string, gated = false): string {
  const index = `${row} * params.ldy + params.colOffset + ${col}`;
  return gated
    ? `{ let at = ${index}; y[at] = ${activationWgsl('silu', 'c[at]')} * (${value}); }`
    : `{ let at = ${index}; y[at] = select(${value}, fma(params.beta, c[at], ${value}), params.hasC != 0u); }`;
}

/**
 * Group g of a workgroup owns column 8 · workgroup + g for every row of x
 * (up to QUANT_STREAM_MAX_ROWS). The workgroup walks K in tiles of 32 code
 * words per row: invocation l of a group reads word l of the tile, the
 * workgroup stages the tile's x in workgroup memory (coalesced, 0 past K),
 * and each invocation reads its word's 32 (q4) or 16 (q8) x values from
 * there. In a storage buffer those lie 64 or 128 bytes apart from one
 * invocation to the next (a cache line each); in workgroup memory each
 * invocation's 16-byte units are XOR-swizzled so that neighbours read
 * different banks.
 */
export function quantStreamShader(v: QuantStreamVariant) {
  const layout = quantLayout(v.format, 1);
  const rows = Array.from({ length: v.rows }, (_, r) => r);
  const columns = Array.from({ length: v.cols }, (_, c) => c);
  const q4 = layout.bits === 4;
  const q6k = layout.bits === 6;
  const q5k = v.format === 'q5k';
  const q5g = layout.bits === 5 && !layout.subBlockScales;
  /** q6k and the 5-bit formats: a lane's high bits (a vec2 or u32) beside its word. */
  const high = q6k || layout.bits === 5;
  const grouped = !layout.scalePerRow;
  const offsets = layout.offsets;
  const word = q6k
    ? Q6K_STREAM_WORD
    : q5k
      ? Q5K_STREAM_WORD
      : q5g
        ? q5g32StreamWord(layout.offset)
        : q4
          ? NIBBLE_WORD
          : BYTE_WORD;
  /** Weights per 16-byte code word; vec4 units of x per word and per tile; lanes that share a bank cycle. */
  const perChunk = 4 * layout.perWord;
  const units = perChunk / 4;
  const tileUnits = LANES * units;
  const lanesPerCycle = 8 / units;
  const xAt = (r: number, unit: string) => `xt[${r * tileUnits}u + lane * ${units}u + ((${unit}) ^ sw)]`;
  const pairs = rows.flatMap((r) => columns.map((c) => ({ r, c, name: `${r}_${c}` })));
  // The word loop stays a loop: unrolled, it made shaders that took seconds to compile on lavapipe.
  // Each u32 word's x is read from the tile once, for every column.
  const xUnits = word.units === 2 ? ['2u * j', '2u * j + 1u'] : ['j'];
  if (v.pair && ((v.cols !== 2 && v.cols !== 4) || v.gated || !grouped)) {
    throw new InvalidArgumentError('a gate·up pair shader takes 2 or 4 columns of a group-scaled format', {
      operation: quantizedMatmul.name,
      argument: 'variant',
      expected: 'cols 2 or 4, no gate, group scales',
      actual: `cols ${v.cols}, gated ${v.gated === true}, format ${v.format}`,
    });
  }
  if (v.int8 && !streamsInt8(v.format)) {
    throw new InvalidArgumentError('int8 activations take 4- or 8-bit codes without high bits', {
      operation: quantizedMatmul.name,
      argument: 'format',
      expected: 'a format of 4 or 8 bits',
      actual: v.format,
    });
  }
  const int8Sizes = int8TileSizes(layout.bits, v.rows);
  if (v.resident !== undefined && (!v.int8 || v.rows !== 1)) {
    throw new InvalidArgumentError('a resident x is one row of int8 activations', {
      operation: quantizedMatmul.name,
      argument: 'variant',
      expected: 'rows 1, int8',
      actual: `rows ${v.rows}, int8 ${v.int8}`,
    });
  }
  const body = v.int8
    ? int8Body(layout.bits, rows, columns, offsets, v.resident === undefined ? undefined : 'first + lane')
    : `for (var j = 0u; j < 4u; j++) {
      ${rows
        .map((r) =>
          [
            `let xa${r} = ${xAt(r, xUnits[0]!)};`,
            ...(word.units === 2 ? [`let xb${r} = ${xAt(r, xUnits[1]!)};`] : []),
            ...(offsets
              ? [
                  `xsum${r} += dot(xa${r}, vec4<f32>(1.0))${word.units === 2 ? ` + dot(xb${r}, vec4<f32>(1.0))` : ''};`,
                ]
              : []),
          ].join(' '),
        )
        .join('\n      ')}
      ${columns
        .map(
          (c) => `{
          ${word.codes(c)}
          ${rows.map((r) => `part${r}_${c} += ${word.term(r)};`).join('\n          ')}
        }`,
        )
        .join('\n      ')}
    }`;
  // The lanes' sums meet in xt once the last tile is read: the shader fits the 16 KiB of workgroup
  // memory every WebGPU device offers (4 rows of q4 x tiles take all of it).
  const at = (r: number, o = '') => {
    const e = `${r * THREADS}u + tid${o}`;
    return `xt[(${e}) / 4u][(${e}) % 4u]`;
  };
  // x[row + k … + 3], 0 past K: one vector load, or elements.
  const xQuad = v.vecX
    ? `fn x_quad(row: u32, k: u32) -> vec4<f32> {
  if (k >= params.k) { return vec4<f32>(0.0); }
  return x[(row + k) / 4u];
}`
    : `fn x_at(row: u32, k: u32) -> f32 { return select(0.0, x[row + min(k, params.k - 1u)], k < params.k); }
fn x_quad(row: u32, k: u32) -> vec4<f32> {
  return vec4<f32>(x_at(row, k), x_at(row, k + 1u), x_at(row, k + 2u), x_at(row, k + 3u));
}`;
  // The norm's weights at k … k + 3, 0 past K (where x is 0 too).
  const normQuad = v.vecNorm
    ? `fn norm_quad(k: u32) -> vec4<f32> {
  if (k >= params.k) { return vec4<f32>(0.0); }
  return normWeight[k / 4u];
}`
    : `fn norm_quad(k: u32) -> vec4<f32> {
  let at = min(vec4<u32>(k) + vec4<u32>(0u, 1u, 2u, 3u), vec4<u32>(params.k - 1u));
  return select(vec4<f32>(0.0), vec4<f32>(normWeight[at.x], normWeight[at.y], normWeight[at.z], normWeight[at.w]), vec4<u32>(k) + vec4<u32>(0u, 1u, 2u, 3u) < vec4<u32>(params.k));
}`;
  // q4k: word c is sub-block c mod 8 of super-block c / 8.
  const subBlockOf = 'sub_block(row, group_of(chunks, c), min(c, chunks - 1u) & 7u)';
  // q4k and q5k: a word's scale and offset come from one read of its sub-block's (sb{c}: d·sc, dmin·m).
  const subBlocks = layout.subBlockScales && !q6k;
  const groupScales = subBlocks
    ? `fn group_scale_offset(row: u32, chunks: u32, c: u32) -> vec2<f32> { return ${subBlockOf}; }`
    : 'fn group_scale(row: u32, chunks: u32, c: u32) -> f32 { return scale_of(row * params.groups + group_of(chunks, c)); }';
  const groupOffsets =
    !offsets || subBlocks
      ? ''
      : 'fn group_offset(row: u32, chunks: u32, c: u32) -> f32 { return offset_of(row * params.groups + group_of(chunks, c)); }';
  const scaleOf = (c: number) => (subBlocks ? `sb${c}.x` : `gs${c}`);
  const offsetOf = (c: number) => (subBlocks ? `sb${c}.y` : `go${c}`);
  /** WGSL lines per column c: its word (and its group's scale, zero point and offset) at chunk `chunk`, as `let`s or assignments. */
  /** A pair's rows of each weight a group; its columns from pairRows on read the up weight through its own copy of the functions. */
  const pairRows = v.cols / 2;
  const fnOf = (c: number) => (v.pair && c >= pairRows ? UP_SUFFIX : '');
  const wordLoads = (prefix: string, chunk: string) =>
    columns.flatMap((c) => [
      `${prefix}wv${c} = word_of${fnOf(c)}(wRow${c}, chunks, ${chunk});`,
      ...(high ? [`${prefix}hv${c} = high_of${fnOf(c)}(wRow${c}, chunks, ${chunk});`] : []),
      ...(subBlocks
        ? [`${prefix}sb${c} = group_scale_offset${fnOf(c)}(wRow${c}, chunks, ${chunk});`]
        : grouped
          ? [`${prefix}gs${c} = group_scale${fnOf(c)}(wRow${c}, chunks, ${chunk});`]
          : []),
      ...(q4 ? [`${prefix}z${c} = group_zero${fnOf(c)}(wRow${c}, chunks, ${chunk});`] : []),
      ...(offsets && !subBlocks
        ? [`${prefix}go${c} = group_offset${fnOf(c)}(wRow${c}, chunks, ${chunk});`]
        : []),
    ]);
  const prefetched = wordLoads('let next_', 'next');
  const advance = prefetched.map((line) => {
    const name = line.slice('let next_'.length, line.indexOf(' ='));
    return `${name} = next_${name};`;
  });
  // Lane 0 of each group stores its columns of every row from the group's sums (acc{r}_{c}).
  // A pair: each row's gate (column p) and up (column P + p) sums, normed alike, give silu(gate) · up.
  const normed = (r: number, c: number) => (v.norm ? `acc${r}_${c} * inv${r}` : `acc${r}_${c}`);
  const pairEpilogue = columns
    .slice(0, pairRows)
    .map(
      (p) => `if (lane == 0u && col${p} < params.n) {
    ${rows
      .map(
        (r) =>
          `if (${r}u < params.m) { y[${r}u * params.ldy + params.colOffset + col${p}] = ${activationWgsl('silu', normed(r, p))} * (${normed(r, pairRows + p)}); }`,
      )
      .join('\n    ')}
  }`,
    )
    .join('\n  ');
  const epilogue = v.pair
    ? pairEpilogue
    : `if (lane == 0u) {
    ${columns
      .map(
        (c) => `if (col${c} < params.n) {
      ${grouped ? '' : `let rowScale = scale_of(col${c});`}
      ${rows
        .map((r) => {
          const total = grouped ? `acc${r}_${c}` : `acc${r}_${c} * rowScale`;
          return `if (${r}u < params.m) { ${storeY(`${r}u`, `col${c}`, v.norm ? `(${total}) * inv${r}` : total, v.gated)} }`;
        })
        .join('\n      ')}
    }`,
      )
      .join('\n    ')}
  }`;
  const accs = pairs.map(({ name }) => `acc${name}`);
  // Without subgroups: each column's sums of every row meet in a tree in xt, lane 0 keeping them.
  const tree = columns
    .map(
      (c) => `${rows.map((r) => `${at(r)} = acc${r}_${c};`).join('\n  ')}
  workgroupBarrier();
  for (var s = ${LANES / 2}u; s > 0u; s >>= 1u) {
    if (lane < s) {
      ${rows.map((r) => `${at(r)} += ${at(r, ' + s')};`).join('\n      ')}
    }
    workgroupBarrier();
  }
  ${rows.map((r) => `acc${r}_${c} = ${at(r)};`).join('\n  ')}`,
    )
    .join('\n  ');
  // The f32 tiles: invocation t widens x unit t of the tile into its swizzled place (times the norm's weights).
  const stageF32 = `if (tid < ${tileUnits}u) {
      let k = first * ${perChunk}u + tid * 4u;
      ${
        v.norm
          ? `let g = norm_quad(k);
      ${rows.map((r) => `{ let q = x_quad(xRow${r}, k); sq${r} += dot(q, q); xt[${r * tileUnits}u + stagePos] = q * g; }`).join('\n      ')}`
          : rows.map((r) => `xt[${r * tileUnits}u + stagePos] = x_quad(xRow${r}, k);`).join('\n      ')
      }
    }`;
  const partZero = word.part === 'f32' ? '0.0' : 'vec2<f32>(0.0)';
  const accumulate = ({ r, c, name }: { r: number; c: number; name: string }) =>
    q6k
      ? `acc${name} = fma(part${name}.x, gs${c}.x, fma(part${name}.y, gs${c}.y, acc${name}));`
      : `${grouped ? `acc${name} = fma(part${name}, ${scaleOf(c)}, acc${name});` : `acc${name} += part${name};`}${
          offsets ? ` acc${name} = fma(xsum${r}, -${offsetOf(c)}, acc${name});` : ''
        }`;
  // Set `set`'s columns of group g: col{c} of the group's column base (a pair: rows c mod P of both weights).
  const residentColumns = (set: string) => {
    const group = `(${set} * params.tiles + wgi) * ${GROUPS}u + tid / ${LANES}u`;
    return v.pair
      ? columns.map((c) => `(${group}) * ${pairRows}u + ${c % pairRows}u`)
      : columns.map((c) => `(${group}) * ${v.cols}u + ${c}u`);
  };
  // A resident x: the row staged whole once, then each group streams its column sets' words without
  // barriers between tiles (the lanes' sums still meet through xt where subgroups do not run in order).
  // Each set's first words are loaded before what comes ahead of them (the staging, the previous set's
  // sums), so that it hides their latency.
  const residentMain = () => `  let wgi = ${linearWorkgroup};
  if (wgi >= params.tiles) { return; }
  let lane = tid % ${LANES}u;
  let chunks = params.rowWords / 4u;
  let xRow0 = 0u;
  ${residentColumns('0u')
    .map((col, c) => `var col${c} = ${col}; var wRow${c} = min(col${c}, params.n - 1u);`)
    .join('\n  ')}
  ${wordLoads('var ', 'lane').join('\n  ')}
  ${v.norm ? 'var sq0 = 0.0;' : ''}
  // Every block of the row's words in whole tiles (zeros past K), so that no lane reads an unstaged one.
  let words = (chunks + ${LANES - 1}u) / ${LANES}u * ${LANES}u;
  ${residentStage(layout.bits, v.norm, layout.bits === 4 ? 'words' : 'words / 2u')}
  workgroupBarrier();
  ${v.norm ? normReduction(rows, at) : ''}
  for (var cs = 0u; cs < params.sets; cs++) {
    ${accs.map((name) => `var ${name} = 0.0;`).join(' ')}
    for (var first = 0u; first < chunks; first += ${LANES}u) {
      let next = first + ${LANES}u + lane;
      ${prefetched.join('\n      ')}
      ${pairs.map(({ name }) => `var part${name} = ${partZero};`).join(' ')}
      ${body}
      ${pairs.map(accumulate).join('\n      ')}
      ${advance.join(' ')}
    }
    // The next set's rows and first words (past the last set, clamped rows nothing sums).
    ${residentColumns('(cs + 1u)')
      .map((col, c) => `let nextCol${c} = ${col}; wRow${c} = min(nextCol${c}, params.n - 1u);`)
      .join('\n    ')}
    ${wordLoads('', 'lane').join('\n    ')}
    ${v.subgroups ? groupSumsOrElse(accs, epilogue) : ''}
    ${tree}
    ${epilogue}${v.subgroups ? GROUP_SUMS_END : ''}
    ${columns.map((c) => `col${c} = nextCol${c};`).join(' ')}
  }`;
  return {
    key: `quantized/stream/m${v.rows}/${v.vecX ? 'v4' : 'scalar'}${v.cols > 1 ? `/c${v.cols}` : ''}${v.int8 ? '/int8' : ''}${v.resident === undefined ? '' : `/r${v.resident}`}${v.gated ? '/gated' : ''}${v.pair ? '/pair' : ''}${v.norm ? (v.vecNorm ? '/norm4' : '/norm') : ''}${v.subgroups ? '/subgroups' : ''}/${v.format}`,
    kernel: quantizedMatmul.name,
    code: () => {
      const module = new ShaderModule();
      if (v.subgroups) module.enable('subgroups');
      declareBindings(
        module,
        v,
        v.vecX ? 'vec4<f32>' : 'f32',
        'vec4<u32>',
        v.norm ? (v.vecNorm ? 'vec4<f32>' : 'f32') : undefined,
        v.pair,
      );
      // int8: the tiles are packed x and each block's Σq, xt the blocks' maxima and the sums' scratch.
      module.workgroupArray('xt', 'vec4<f32>', v.int8 ? (v.rows * THREADS) / 4 : v.rows * tileUnits);
      if (v.resident !== undefined) {
        const sizes = residentSizes(layout.bits, v.resident);
        module.workgroupArray('xq', 'vec4<u32>', sizes.packed);
        module.workgroupArray('xd', 'vec2<f32>', sizes.blocks);
      } else if (v.int8) {
        module.workgroupArray('xq', 'vec4<u32>', int8Sizes.packed);
        module.workgroupArray('xs', 'vec4<f32>', int8Sizes.blocks);
      }
      if (v.subgroups) module.workgroupVar('scattered', 'atomic<u32>');
      const weightFunctions = `${dequantFunctions(v)}
${
  q6k
    ? Q6K_STREAM_FUNCTIONS
    : q5k
      ? Q5K_STREAM_FUNCTIONS
      : q5g
        ? Q5G32_STREAM_FUNCTIONS
        : `fn word_of(row: u32, chunks: u32, c: u32) -> vec4<u32> {
  if (c >= chunks) { return vec4<u32>(0u); }
  return packed[row * chunks + c];
}`
}
${
  grouped && !q6k
    ? `// The group of word c's first weight; past the row, the last word's (clamped to the last group: a q8g16
// row's padding half-block lies past it).
fn group_of(chunks: u32, c: u32) -> u32 { return min(min(c, chunks - 1u) * ${perChunk}u / ${layout.groupSize}u, params.groups - 1u); }
${groupScales}`
    : ''
}
${q4 ? 'fn group_zero(row: u32, chunks: u32, c: u32) -> vec4<f32> { return vec4<f32>(zero_of(row, group_of(chunks, c))); }' : ''}
${groupOffsets}`;
      module.declare(`${weightFunctions}
${v.pair ? upWeightFunctions(weightFunctions) : ''}
${v.gated || v.pair ? ACTIVATION_FUNCTIONS_WGSL : ''}
${xQuad}
${v.norm ? normQuad : ''}`);
      return module.build(
        undefined,
        THREADS,
        v.resident !== undefined
          ? residentMain()
          : `  let wgi = ${linearWorkgroup};
  if (wgi >= params.tiles) { return; }
  let lane = tid % ${LANES}u;
  ${
    v.pair
      ? `// Group g of the workgroup owns output columns colBase … +${pairRows}: those rows of the gate, then of up.
  let colBase = (wgi * ${GROUPS}u + tid / ${LANES}u) * ${pairRows}u;
  ${columns.map((c) => `let col${c} = colBase + ${c % pairRows}u;`).join(' ')}`
      : `// Group g of the workgroup owns ${v.cols} adjacent column(s) from colBase.
  let colBase = (wgi * ${GROUPS}u + tid / ${LANES}u) * ${v.cols}u;
  ${columns.map((c) => `let col${c} = colBase + ${c}u;`).join(' ')}`
  }
  // Columns past N read the last row of W (never written); every invocation takes part in the barriers.
  ${columns.map((c) => `let wRow${c} = min(col${c}, params.n - 1u);`).join(' ')}
  let chunks = ${q5g ? 'params.groups' : high ? 'params.groups * 8u' : 'params.rowWords / 4u'};
  let sw = (lane / ${lanesPerCycle}u) % ${units}u;
  // Staging: invocation t widens x unit t of the tile into its swizzled place.
  let stageLane = tid / ${units}u;
  let stagePos = stageLane * ${units}u + ((tid % ${units}u) ^ ((stageLane / ${lanesPerCycle}u) % ${units}u));
  ${rows.map((r) => `let xRow${r} = min(${r}u, params.m - 1u) * params.k;`).join('\n  ')}
  ${accs.map((name) => `var ${name} = 0.0;`).join(' ')}
  ${v.norm ? rows.map((r) => `var sq${r} = 0.0;`).join(' ') : ''}
  // Each tile's code words (and each group's scale, zero point and offset) are loaded a tile ahead.
  ${wordLoads('var ', 'lane').join('\n  ')}
  for (var first = 0u; first < chunks; first += ${LANES}u) {
    let next = first + ${LANES}u + lane;
    ${prefetched.join('\n    ')}
    workgroupBarrier();
    ${v.int8 ? int8Stage(layout.bits, rows, v.norm, perChunk) : stageF32}
    workgroupBarrier();
    ${pairs.map(({ name }) => `var part${name} = ${partZero};`).join(' ')}
    ${offsets && !v.int8 ? rows.map((r) => `var xsum${r} = 0.0;`).join(' ') : ''}
    ${body}
    ${pairs.map(accumulate).join('\n    ')}
    ${advance.join(' ')}
  }
  workgroupBarrier();
  ${v.norm ? normReduction(rows, at) : ''}${v.subgroups ? groupSumsOrElse(accs, epilogue) : ''}
  ${tree}
  ${epilogue}${v.subgroups ? GROUP_SUMS_END : ''}`,
        `@builtin(local_invocation_index) tid: u32${v.subgroups ? SUBGROUP_BUILTINS : ''}`,
      );
    },
  };
}

/**
 * WGSL: each row's Σx² over the workgroup's stagers (a tree in xt, whose
 * tiles are done with), then inv<r> = 1 / sqrt(mean(x²) + eps) in every
 * invocation.
 */
function normReduction(rows: readonly number[], at: (r: number, o?: string) => string): string {
  return `${rows.map((r) => `${at(r)} = sq${r};`).join('\n  ')}
  workgroupBarrier();
  for (var s = ${THREADS / 2}u; s > 0u; s >>= 1u) {
    if (tid < s) {
      ${rows.map((r) => `${at(r)} += ${at(r, ' + s')};`).join('\n      ')}
    }
    workgroupBarrier();
  }
  ${rows.map((r) => `let inv${r} = 1.0 / sqrt(xt[${(r * THREADS) / 4}u][0] / f32(params.k) + params.eps);`).join('\n  ')}
  workgroupBarrier();`;
}

/**
 * Workgroup (tile) computes y[64·tm … +64, 64·tn … +64], invocation t a 4 × 4
 * block (rows 4 · (t / 16), columns 4 · (t % 16)). Each 32-k step stages x as
 * xs[k][m] (invocation t: row t / 4, k 8 · (t % 4) … +8, 0 past M and K) and
 * W as ws[k][n] (column t / 4, its codes 8 · (t % 4) … +8, times the group's
 * scale), then takes 32 steps of two vec4 reads and 16 FMAs.
 */
export function quantTileShader(v: QuantShaderVariant) {
  const layout = quantLayout(v.format, 1);
  const q4 = layout.bits === 4;
  // q4g32a's, q8g32a's and q4k's value: f32(q · scale) − offset, as ggml forms it.
  const less = layout.subBlockScales
    ? ' - vec4<f32>(sb.y)'
    : layout.offsets
      ? ' - vec4<f32>(offset_of(wRow * params.groups + g))'
      : '';
  // The group of this invocation's 8 codes (a q8g16 step holds two), clamped to the last.
  const group = `min((k0 + quarter * 8u) / ${layout.groupSize}u, params.groups - 1u)`;
  // q4k: the step's 32 k are sub-block (k0 / 32) mod 8 of super-block g.
  const scaleQ4 = layout.subBlockScales
    ? `let sb = sub_block(wRow, g, (k0 / 32u) & 7u);
    let s = sb.x;`
    : 'let s = scale_of(wRow * params.groups + g);';
  const store = (k: string, value: string) => `ws[(${k}) * ${TILE / 4}u + wCol / 4u][wCol % 4u] = ${value};`;
  const stageW =
    layout.bits === 6
      ? q6kStageTile(store)
      : layout.subBlockScales && layout.bits === 5
        ? q5kStageTile(store)
        : layout.bits === 5
          ? q5g32StageTile(store, layout.offset, less)
          : q4
            ? `let word = packed[wRow * params.rowWords + k0 / 8u + quarter];
    let g = ${group};
    ${scaleQ4}
    let z = vec4<f32>(zero_of(wRow, g));
    let lo = codes_lo(word, z) * s${less};
    let hi = codes_hi(word, z) * s${less};
    for (var j = 0u; j < 4u; j++) {
      ws[(quarter * 8u + j) * ${TILE / 4}u + wCol / 4u][wCol % 4u] = lo[j];
      ws[(quarter * 8u + 4u + j) * ${TILE / 4}u + wCol / 4u][wCol % 4u] = hi[j];
    }`
            : `${layout.offsets ? `let g = ${group};\n    ` : ''}let s = ${layout.scalePerRow ? 'scale_of(wRow)' : `scale_of(wRow * params.groups + ${layout.offsets ? 'g' : group})`};
    for (var i = 0u; i < 2u; i++) {
      let q = codes_lo(packed[wRow * params.rowWords + k0 / 4u + quarter * 2u + i]) * s${less};
      for (var j = 0u; j < 4u; j++) {
        ws[(quarter * 8u + i * 4u + j) * ${TILE / 4}u + wCol / 4u][wCol % 4u] = q[j];
      }
    }`;
  return {
    key: `quantized/tile64x64x32/${v.format}`,
    kernel: quantizedMatmul.name,
    code: () => {
      const module = new ShaderModule();
      declareBindings(module, v, 'f32', 'u32');
      module.workgroupArray('xs', 'vec4<f32>', (TILE_K * TILE) / 4);
      module.workgroupArray('ws', 'vec4<f32>', (TILE_K * TILE) / 4);
      module.declare(dequantFunctions(v));
      return module.build(
        undefined,
        THREADS,
        `  let wgi = ${linearWorkgroup};
  if (wgi >= params.tiles) { return; }
  let row0 = (wgi / params.tilesN) * ${TILE}u;
  let col0 = (wgi % params.tilesN) * ${TILE}u;
  let quarter = tid % 4u;
  let xr = tid / 4u;
  let xRow = row0 + xr;
  let wCol = tid / 4u;
  // Columns past N read the last row of W (never stored).
  let wRow = min(col0 + wCol, params.n - 1u);
  let ty = tid / 16u;
  let tx = tid % 16u;
  var acc: array<vec4<f32>, 4>;
  for (var k0 = 0u; k0 < params.k; k0 += ${TILE_K}u) {
    for (var j = 0u; j < 8u; j++) {
      let kk = k0 + quarter * 8u + j;
      var value = 0.0;
      if (xRow < params.m && kk < params.k) { value = x[xRow * params.k + kk]; }
      xs[(quarter * 8u + j) * ${TILE / 4}u + xr / 4u][xr % 4u] = value;
    }
    ${stageW}
    workgroupBarrier();
    for (var kk = 0u; kk < ${TILE_K}u; kk++) {
      let a = xs[kk * ${TILE / 4}u + ty];
      let b = ws[kk * ${TILE / 4}u + tx];
      for (var i = 0u; i < 4u; i++) { acc[i] = fma(vec4<f32>(a[i]), b, acc[i]); }
    }
    workgroupBarrier();
  }
  for (var i = 0u; i < 4u; i++) {
    let row = row0 + ty * 4u + i;
    for (var j = 0u; j < 4u; j++) {
      let col = col0 + tx * 4u + j;
      if (row < params.m && col < params.n) { ${storeY('row', 'col', 'acc[i][j]')} }
    }
  }`,
        '@builtin(local_invocation_index) tid: u32',
      );
    },
  };
}

const aligned = (offset: number) => offset % 16 === 0;

/** The weight operands of a product: rows of each are output columns. */
export interface QuantWeightOperands {
  readonly packed: Operand;
  readonly scales: Operand;
  readonly zeros: Operand | undefined;
  readonly offsets: Operand | undefined;
  readonly [name: string]: Operand | undefined;
}

/**
 * Whether a gate·up pair of `m` rows goes in one pass of the streaming shader
 * (encodeQuantizedF32's `up`): group scales, both weights' scales
 * stored alike, and the device binding both weights, x, y and a norm.
 */
export function pairInOnePass(
  encoder: KernelEncoder,
  m: number,
  format: QuantFormat,
  gate: QuantWeightOperands,
  up: QuantWeightOperands,
  norm: boolean,
): boolean {
  const layout = quantLayout(format, 1);
  const perWeight = 2 + (layout.zeroPoints || layout.subBlockScales ? 1 : 0) + (layout.offsets ? 1 : 0);
  return (
    streamsRows(encoder, m, format) &&
    !layout.scalePerRow &&
    !layout.zeroPoints &&
    gate.scales.dtype === up.scales.dtype &&
    (gate.offsets?.dtype ?? 'none') === (up.offsets?.dtype ?? 'none') &&
    2 + 2 * perWeight + (norm ? 1 : 0) <= encoder.limits.maxStorageBuffersPerShaderStage
  );
}

/** Whether products of `m` rows in `format` take the streaming shader, which folds a norm. */
export function streamsRows(encoder: KernelEncoder, m: number, format: QuantFormat): boolean {
  return (
    m <= QUANT_STREAM_MAX_ROWS && ((encoder.tuning.qgemvVariant ?? 'a') === 'a' || !isQgemvFormat(format))
  );
}

/** What encodeQuantizedF32 computes: beta · c added, or with `gated`, y = silu(c) · (x · Wᵀ) (beta unused). */
export interface QuantF32Attrs {
  readonly format: QuantFormat;
  readonly beta: number;
  /** The call's `activations` attribute: 'int8' stages x as int8 blocks where the format's words allow (unless the backend's switch says otherwise). */
  readonly activations?: QuantActivations;
  /** Only where streamsRows holds (the streaming shader's epilogue). */
  readonly gated?: boolean;
  /**
   * The up weight of a gate·up pair taken in one pass: y = silu(x · Wᵀ) · (x · Upᵀ), W the
   * gate's (no c; where pairInOnePass holds).
   */
  readonly up?: QuantWeightOperands;
}

/**
 * y = x · dequant(W)ᵀ (+ beta · c) of f32 x, c and y; with `norm` (f32
 * weight: products where streamsRows holds), rmsNorm(x) folded in.
 */
export function encodeQuantizedF32(
  encoder: KernelEncoder,
  x: Operand,
  weight: QuantWeightOperands,
  c: Operand | undefined,
  y: Operand,
  attrs: QuantF32Attrs,
  norm?: { readonly weight: Operand; readonly eps: number },
): void {
  // A weight (or x, c, y) larger than one binding: a dispatch per piece of whole rows, each
  // writing its columns of y.
  const weights = attrs.up ? [weight, attrs.up] : [weight];
  for (const piece of productPieces(encoder, quantizedMatmul.name, { x, c, y, weights })) {
    encodeQuantizedPiece(encoder, piece, attrs, norm);
  }
}

function encodeQuantizedPiece(
  encoder: KernelEncoder,
  piece: ProductPiece<QuantWeightOperands>,
  attrs: QuantF32Attrs,
  norm: { readonly weight: Operand; readonly eps: number } | undefined,
): void {
  const { x, c, y, columns, ldy } = piece;
  const weight = piece.weights[0]!;
  const [m, k] = x.shape as [number, number];
  const n = columns.count;
  if (m === 0 || n === 0) return;
  const layout = quantLayout(attrs.format, k);
  const variant: QuantShaderVariant = { format: attrs.format };
  // Absent zero points and c bind read-only placeholders the shader never reads.
  const weightBuffers = (w: QuantWeightOperands) => [
    w.packed,
    w.scales,
    ...(layout.zeroPoints || layout.subBlockScales ? [w.zeros ?? w.packed] : []),
    ...(layout.offsets ? [w.offsets!] : []),
  ];
  const up = attrs.up ? piece.weights[1]! : undefined;
  const buffers = up
    ? [x, ...weightBuffers(weight), ...weightBuffers(up), y]
    : [x, ...weightBuffers(weight), c ?? x, y];
  const values = {
    hasC: c ? 1 : 0,
    hasZeros: weight.zeros && layout.zeroPoints ? 1 : 0,
    scaleKind: SCALE_KINDS[storageOf(weight.scales.dtype)],
    m,
    n,
    k,
    rowWords: layout.rowWords,
    groups: layout.groups,
    zeroWords: layout.zeroWords,
    beta: attrs.beta,
    ldy,
    colOffset: columns.start,
    eps: norm?.eps ?? 0,
  };
  // Small M: this file's shader, unless the qgemvVariant option picks
  // quantizedGemv.ts's: on an H100 its variants ran 1.2–2× slower than this
  // one (q4g32 1×4096×4096 15.7–22.3 µs against 11.0), while its pair kernel
  // beats two of these for the fused gate·up (16.8 µs against 2 × 10.4).
  const gemv = encoder.tuning.qgemvVariant ?? 'a';
  if ((attrs.gated || up) && !streamsRows(encoder, m, attrs.format)) {
    throw new InvalidArgumentError('only the streaming shader gates its product', {
      operation: quantizedMatmul.name,
      argument: 'gated',
      expected: `at most ${QUANT_STREAM_MAX_ROWS} rows on the streaming shader`,
      actual: `${m} rows`,
    });
  }
  if (norm && !streamsRows(encoder, m, attrs.format)) {
    throw new InvalidArgumentError('only the streaming shader folds a norm', {
      operation: quantizedMatmul.name,
      argument: 'normWeight',
      expected: `at most ${QUANT_STREAM_MAX_ROWS} rows on the streaming shader`,
      actual: `${m} rows, variant ${gemv}`,
    });
  }
  if (m <= QUANT_STREAM_MAX_ROWS && gemv !== 'a' && isQgemvFormat(attrs.format)) {
    encodeQuantizedGemvF32(encoder, gemv, { x, weights: [weight], c, y, columns }, attrs);
    return;
  }
  if (m <= QUANT_STREAM_MAX_ROWS) {
    // A pair: each group one output column (or quantPairColumns), from a row of each weight.
    const pairRows = encoder.tuning.quantPairColumns ?? 1;
    const cols: QuantColumns = up
      ? pairRows === 2
        ? 4
        : 2
      : quantColumnsFor(n, layout.bits, encoder.tuning.quantColumns);
    const int8 =
      streamsInt8(attrs.format) && takesInt8Activations(attrs.activations, encoder.tuning.qgemvActivations);
    const needed = Math.ceil(n / (GROUPS * (up ? pairRows : cols)));
    const resident =
      int8 && m === 1
        ? residentWordsFor(encoder, layout.bits, layout.rowWords / 4, { k, norm: norm !== undefined })
        : undefined;
    // A resident x: at most MAX_RESIDENT_WORKGROUPS workgroups, each taking `sets` column sets in turn.
    const most = encoder.tuning.quantResidentWorkgroups ?? MAX_RESIDENT_WORKGROUPS;
    const tiles = resident === undefined ? needed : Math.min(needed, most);
    const sets = Math.ceil(needed / tiles);
    encoder.dispatch({
      // One row (decoding) or up to 4, rows past M clamped: two shaders per variant, not four.
      shader: quantStreamShader({
        format: attrs.format,
        rows: m === 1 ? 1 : QUANT_STREAM_MAX_ROWS,
        vecX: k % 32 === 0 && aligned(x.offset),
        norm: norm !== undefined,
        vecNorm: norm !== undefined && k % 32 === 0 && aligned(x.offset) && aligned(norm.weight.offset),
        subgroups: encoder.features.has('subgroups'),
        cols,
        // As the call's attribute allows (or the switch forces): on an H200 int8 x took Llama-3.1-8B's
        // Q4_K gate·up from 45.5 to 31.9 µs.
        int8,
        gated: attrs.gated === true,
        pair: up !== undefined,
        ...(resident === undefined ? {} : { resident }),
      }),
      buffers: norm ? [...buffers, norm.weight] : buffers,
      params: { layout: PARAMS, values: { ...values, tiles, tilesN: tiles, sets } },
      workgroups: gridFor(tiles, encoder.limits),
    });
    return;
  }
  const tilesN = Math.ceil(n / TILE);
  const tiles = tilesN * Math.ceil(m / TILE);
  encoder.dispatch({
    shader: quantTileShader(variant),
    buffers,
    params: { layout: PARAMS, values: { ...values, tiles, tilesN } },
    workgroups: gridFor(tiles, encoder.limits),
  });
}

export const QUANTIZED_KERNELS: readonly AnyWgpuKernel[] = [
  wgpuKernel(
    quantizedMatmul,
    (encoder, { inputs, outputs, attrs }) => {
      const [xIn, packed, scales, zeros, c, offsets, normWeight] = inputs;
      const weight = { packed: packed!, scales: scales!, zeros, offsets };
      // A norm folds into the streaming shader; the other shaders take it first, into f32 scratch.
      const folds = normWeight !== undefined && streamsRows(encoder, xIn!.shape[0]!, attrs.format);
      const x =
        normWeight && !folds ? normedF32(encoder, xIn!, normWeight, attrs.eps, quantizedMatmul.name) : xIn;
      const widen = { x, c, normWeight: folds ? normWeight : undefined };
      encodeWithF32Activations(encoder, quantizedMatmul.name, widen, { y: outputs[0] }, (i, o) => {
        const norm = i.normWeight ? { weight: i.normWeight, eps: attrs.eps } : undefined;
        encodeQuantizedF32(encoder, i.x!, weight, i.c, o.y!, attrs, norm);
      });
    },
    // x, c and y in f32, f16 or bf16 (halves through f32 scratch); scales in any of them, read as stored.
    // A weight larger than one binding is bound in pieces of whole rows.
    { splitsLargeOperands: true, dtypes: FLOAT },
  ),
];
