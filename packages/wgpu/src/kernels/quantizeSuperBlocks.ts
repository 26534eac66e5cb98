import {
  Q4K_SUB_BLOCK,
  Q4K_SUB_SCALE_WORDS,
  Q4K_SUPER_BLOCK,
  Q5K_HIGH_WORDS_AT,
  Q5K_SUPER_WORDS,
  Q6K_HIGH_WORDS_AT,
  Q6K_SCALE_WORDS,
  Q6K_SUB_BLOCK,
  Q6K_SUPER_WORDS,
  quantizeRows,
  reciprocalOf,
} from '@rayo/core';
import { F16_TO_F32, narrowFunctions, type Storage } from '../wgsl/half.js';
import { ShaderModule, type WgslType } from '../wgsl/module.js';
import { elementIndex, WG } from './common.js';
import {
  f32Literal,
  loadWeight,
  NEAREST,
  QUANTIZE_PARAMS,
  storedAs,
  storeScale,
} from './quantizeArithmetic.js';

// quantizeRows for q4k, q5k and q6k (GGUF's Q4_K, Q5_K and Q6_K layouts,
// quant/layout.ts), bit for bit as the host quantizer (quant/q4k.ts,
// quant/q5k.ts, quant/q6k.ts): an invocation per super-block of 256. A first
// pass finds the sub-blocks' ranges and the largest of them, which give d (and
// q4k's and q5k's dmin); a second pass, sub-block by sub-block, finds its
// range again (from cache), its 6-bit or int8 scale, and writes its codes (q5k
// is q4k with 31 levels and a word of high bits per sub-block). A product whose rounding matters and
// that a compiler could fuse into the next addition or subtraction goes
// through max(·, 0) (every such product is ≥ 0): d and dmin, f32(dmin · m)
// before w + it, f32(d · sc) before nearest() splits it. A super-block holding a
// weight that is not finite writes NaN d (and dmin) and zero codes and
// sub-block scales.

/** A product p ≥ 0 rounded to f32 on its own, never fused into what uses it. */
const ROUNDED = 'fn rounded(p: f32) -> f32 { return max(p, 0.0); }';

function nonFinite(x: string): string {
  return `(bitcast<u32>(${x}) & 0x7f800000u) == 0x7f800000u`;
}

/** q4k, or q5k (`levels` 31): its codes' low nibbles where q4k's go and high bits in word 32 + j. */
function q4kBody(scale: Storage, levels: 15 | 31): string {
  const subBlocks = Q4K_SUPER_BLOCK / Q4K_SUB_BLOCK;
  const q5k = levels === 31;
  return `  var largestScale = 0.0;
  var largestMin = 0.0;
  var bad = false;
  for (var j = 0u; j < ${subBlocks}u; j++) {
    let range = sub_range(first + j * ${Q4K_SUB_BLOCK}u);
    bad = bad || range.bad;
    largestScale = max(largestScale, range.scale);
    largestMin = max(largestMin, range.min);
  }
  let d = ${storedAs(scale, `rounded(largestScale * ${f32Literal(reciprocalOf(63))})`)};
  let dmin = ${storedAs(scale, `rounded(largestMin * ${f32Literal(reciprocalOf(63))})`)};
  var words = array<u32, ${Q4K_SUB_SCALE_WORDS}>(0u, 0u, 0u);
  for (var j = 0u; j < ${subBlocks}u; j++) {
    let base = first + j * ${Q4K_SUB_BLOCK}u;
    let range = sub_range(base);
    var sc = 0u;
    var m = 0u;
    if (d > 0.0) { sc = u32(min(63, nearest(range.scale, d))); }
    if (dmin > 0.0) { m = u32(min(63, nearest(range.min, dmin))); }
    // Sub-blocks 0-3 keep sc and m in bytes j and j + 4; 4-7 their low nibbles in byte j + 4 and their
    // high pairs in the top bits of bytes j - 4 and j (ggml's get_scale_min_k4).
    let shift = 8u * (j & 3u);
    let low = j < 4u;
    words[0] = words[0] | (select((sc >> 4u) << 6u, sc, low) << shift);
    words[1] = words[1] | (select((m >> 4u) << 6u, m, low) << shift);
    words[2] = words[2] | (select((sc & 15u) | ((m & 15u) << 4u), 0u, low) << shift);
    let s = rounded(d * f32(sc));
    let offset = rounded(dmin * f32(m));${q5k ? '\n    var high = 0u;' : ''}
    for (var word = 0u; word < ${Q4K_SUB_BLOCK / 8}u; word++) {
      var bits = 0u;
      for (var e = 0u; e < 8u; e++) {
        var q = 0;
        if (s > 0.0) { q = clamp(nearest(weight(base + 8u * word + e) + offset, s), 0, ${levels}); }
        ${
          q5k
            ? `// The high bit at 8 · (e / 2) + 2 · word + e mod 2 (the inverse of q5kCode).
        high = high | ((u32(q) >> 4u) << (8u * (e >> 1u) + 2u * word + (e & 1u)));
        bits = bits | ((u32(q) & 15u) << (4u * e));`
            : 'bits = bits | (u32(q) << (4u * e));'
        }
      }
      packed[out + ${Q4K_SUB_BLOCK / 8}u * j + word] = select(bits, 0u, bad);
    }${q5k ? `\n    packed[out + ${Q5K_HIGH_WORDS_AT}u + j] = select(high, 0u, bad);` : ''}
  }
  for (var i = 0u; i < ${Q4K_SUB_SCALE_WORDS}u; i++) {
    zeros[block * ${Q4K_SUB_SCALE_WORDS}u + i] = select(words[i], 0u, bad);
  }
  ${storeScale(scale, 'scales', 'block', 'select(d, bitcast<f32>(nanBits), bad)')}
  ${storeScale(scale, 'offsets', 'block', 'select(dmin, bitcast<f32>(nanBits), bad)')}`;
}

const q4kRange = (levels: 15 | 31) => `struct SubRange { scale: f32, min: f32, bad: bool }
// Sub-block [at, at + ${Q4K_SUB_BLOCK}): its scale f32(f32(hi − lo) · f32(1 / ${levels})) and min −lo over [min(0, lo), hi].
fn sub_range(at: u32) -> SubRange {
  var lo = 0.0;
  var hi = 0.0;
  var bad = false;
  for (var i = at; i < at + ${Q4K_SUB_BLOCK}u; i++) {
    let x = weight(i);
    bad = bad || ${nonFinite('x')};
    lo = min(lo, x);
    hi = max(hi, x);
  }
  let low = positive_zero(lo);
  return SubRange((positive_zero(hi) - low) * ${f32Literal(reciprocalOf(levels))}, positive_zero(-low), bad);
}`;

function q6kBody(scale: Storage): string {
  const subBlocks = Q4K_SUPER_BLOCK / Q6K_SUB_BLOCK;
  return `  var largest = 0.0;
  var bad = false;
  for (var j = 0u; j < ${subBlocks}u; j++) {
    let amax = sub_amax(first + j * ${Q6K_SUB_BLOCK}u);
    bad = bad || ${nonFinite('amax')};
    largest = max(largest, amax);
  }
  let d = ${storedAs(scale, `rounded(largest * ${f32Literal(reciprocalOf(127))})`)};
  for (var word = 0u; word < ${Q6K_SCALE_WORDS}u; word++) {
    var scaleWord = 0u;
    for (var jj = 0u; jj < 4u; jj++) {
      let j = 4u * word + jj;
      let base = first + j * ${Q6K_SUB_BLOCK}u;
      var sc = 0u;
      if (d > 0.0) { sc = u32(min(127, nearest(sub_amax(base), d))); }
      scaleWord = scaleWord | (sc << (8u * jj));
      let s = rounded(d * f32(sc));
      // Codes 16j … 16j + 15: nibbles in words 2j and 2j + 1, high pairs in word ${Q6K_HIGH_WORDS_AT} + j
      // (the inverse of q6kCode).
      var high = 0u;
      for (var h = 0u; h < 2u; h++) {
        var nibbles = 0u;
        for (var e = 0u; e < 8u; e++) {
          var q = 0;
          if (s > 0.0) { q = clamp(nearest(weight(base + 8u * h + e), s), -32, 31); }
          let code = u32(q + 32);
          nibbles = nibbles | ((code & 15u) << (4u * e));
          high = high | ((code >> 4u) << (8u * (e >> 1u) + 2u * (e & 1u) + 4u * h));
        }
        packed[out + 2u * j + h] = select(nibbles, 0u, bad);
      }
      packed[out + ${Q6K_HIGH_WORDS_AT}u + j] = select(high, 0u, bad);
    }
    zeros[block * ${Q6K_SCALE_WORDS}u + word] = select(scaleWord, 0u, bad);
  }
  ${storeScale(scale, 'scales', 'block', 'select(d, bitcast<f32>(nanBits), bad)')}`;
}

const Q6K_AMAX = `// Sub-block [at, at + ${Q6K_SUB_BLOCK}): f32(max |w| · f32(1 / 31)); not finite where a weight is not.
fn sub_amax(at: u32) -> f32 {
  var most = 0.0;
  var bad = false;
  for (var i = at; i < at + ${Q6K_SUB_BLOCK}u; i++) {
    let x = weight(i);
    bad = bad || ${nonFinite('x')};
    most = max(most, abs(x));
  }
  return select(most * ${f32Literal(reciprocalOf(31))}, bitcast<f32>(infBits), bad);
}`;

/** The shader of `quantizeRows` for q4k, q5k or q6k: an invocation per super-block, `params.units` of them per row. */
export function quantizeSuperBlocksShader(format: 'q4k' | 'q5k' | 'q6k', weight: Storage, scale: Storage) {
  const levels = format === 'q5k' ? 31 : 15;
  const scaleType: WgslType = scale === 'f32' ? 'f32' : 'atomic<u32>';
  const names: [string, WgslType, 'read' | 'read_write'][] = [
    ['w', weight === 'f32' ? 'f32' : 'u32', 'read'],
    ['packed', 'u32', 'read_write'],
    ['scales', scaleType, 'read_write'],
    ['zeros', 'u32', 'read_write'],
    ...(format !== 'q6k' ? [['offsets', scaleType, 'read_write'] as [string, WgslType, 'read_write']] : []),
  ];
  const superWords =
    format === 'q4k' ? Q4K_SUPER_BLOCK / 8 : format === 'q5k' ? Q5K_SUPER_WORDS : Q6K_SUPER_WORDS;
  return {
    key: `quantizeRows/${format}/${weight}-${scale}/wg${WG}`,
    kernel: quantizeRows.name,
    code: () => {
      const module = new ShaderModule().params(QUANTIZE_PARAMS);
      for (const [name, type, access] of names) module.storage(name, type, access);
      module.declare(NEAREST);
      module.declare(ROUNDED);
      module.declare(loadWeight(weight));
      if (scale !== 'f32') module.declare(narrowFunctions(scale));
      if (scale === 'f16' || weight === 'f16') module.declare(F16_TO_F32);
      module.declare(format === 'q6k' ? Q6K_AMAX : q4kRange(levels));
      return module.build(
        undefined,
        WG,
        `  ${elementIndex('params.count')}
  let row = i / params.units;
  let block = i;
  let first = row * params.k + (i % params.units) * ${Q4K_SUPER_BLOCK}u;
  let out = i * ${superWords}u;
${format === 'q6k' ? q6kBody(scale) : q4kBody(scale, levels)}`,
      );
    },
  };
}
