import { codeRange, FLOAT, type QuantFormat, quantizeRows, quantLayout, reciprocalOf } from '@rayo/core';
import { type AnyWgpuKernel, wgpuKernel } from '../kernel.js';
import { rowPieces, rowsOf } from '../rowPieces.js';
import { F16_TO_F32, narrowFunctions, type Storage, storageOf } from '../wgsl/half.js';
import { ShaderModule, type WgslType } from '../wgsl/module.js';
import { elementGrid, elementIndex, WG } from './common.js';
import {
  f32Literal,
  loadWeight,
  NEAREST,
  QUANTIZE_PARAMS,
  storedAs,
  storeScale,
} from './quantizeArithmetic.js';
import { quantizeSuperBlocksShader } from './quantizeSuperBlocks.js';

// quantizeRows: a dense weight [N, K] to one of core's quantized layouts
// (quant/layout.ts), bit for bit as the host quantizer (quant/rounding.ts,
// and quantizeArithmetic.ts for how): an invocation per group (per 8 groups
// with zero points, whose nibbles share a word), reading its group twice:
// for the range, then to write the codes word by word (q5g32's and q5g32a's
// and their group's word of high bits). q4k, q5k and q6k have a
// shader of their own (quantizeSuperBlocks.ts). A group with a weight that
// is not finite writes a NaN scale (and offset), codes 0 and zero point 0.

export function quantizeRowsShader(format: QuantFormat, zeros: boolean, weight: Storage, scale: Storage) {
  const layout = quantLayout(format, 1);
  const offsets = layout.offsets;
  const { lowest, levels } = codeRange(layout);
  const perThread = zeros ? 8 : 1;
  const scaleType: WgslType = scale === 'f32' ? 'f32' : 'atomic<u32>';
  const stepOf = (range: string, n: number) => storedAs(scale, `(${range}) * ${f32Literal(reciprocalOf(n))}`);
  // The group's range and scale (and zero point or offset).
  const range = offsets
    ? `    lo = min(lo, x);
    hi = max(hi, x);`
    : zeros
      ? `    lo = min(lo, x);
    hi = max(hi, x);`
      : '    amax = max(amax, abs(x));';
  const start = offsets
    ? 'var lo = bitcast<f32>(infBits);\n    var hi = -lo;'
    : 'var lo = 0.0;\n    var hi = 0.0;';
  // −lowest · s is exact (a power of two): ldexp, not a product, so that no compiler fuses the
  // scale's own product into the subtraction (NVIDIA's did, one ulp off the host's offsets).
  const scaleOf = offsets
    ? `let low = positive_zero(lo);
    let s = ${stepOf('positive_zero(hi) - low', levels)};
    let offset = ${storedAs(scale, lowest === 0 ? '-low' : `-(ldexp(s, ${Math.log2(-lowest)}) + low)`)};
    var zero = 0;`
    : zeros
      ? `let low = positive_zero(lo);
    let s = ${stepOf('positive_zero(hi) - low', 15)};
    var zero = 0;
    if (s > 0.0) { zero = min(15, nearest(-low, s)); }`
      : // Symmetric around 8 (q4) or 16 (q5g32): a step of max|w| / 7 or / 15.
        `let s = ${stepOf('amax', layout.bits === 8 ? 127 : layout.offset - 1)};
    let zero = ${layout.bits === 8 ? 0 : layout.offset};`;
  const t = offsets ? 'x + offset' : 'x';
  const fallback = offsets ? `${lowest}` : 'zero';
  const mask = layout.bits === 8 ? '0xffu' : '0xfu';
  // q5g32, q5g32a: nibbles where q4's go, and the group's high word (4G + g) after the row's nibbles, code j
  // of its nibble word w at bit 8 · (j / 2) + 2w + j mod 2 (core's q5kHighBit); the last group's
  // invocation zeroes the row's padding high words.
  const q5 = layout.bits === 5;
  const codeShift = q5 ? 4 : layout.bits;
  const names: [string, WgslType, 'read' | 'read_write'][] = [
    ['w', weight === 'f32' ? 'f32' : 'u32', 'read'],
    ['packed', 'u32', 'read_write'],
    ['scales', scaleType, 'read_write'],
    ...(zeros ? [['zeros', 'u32', 'read_write'] as [string, WgslType, 'read_write']] : []),
    ...(offsets ? [['offsets', scaleType, 'read_write'] as [string, WgslType, 'read_write']] : []),
  ];
  return {
    key: `quantizeRows/${format}${zeros ? '/zeros' : ''}/${weight}-${scale}/wg${WG}`,
    kernel: quantizeRows.name,
    code: () => {
      const module = new ShaderModule().params(QUANTIZE_PARAMS);
      for (const [name, type, access] of names) module.storage(name, type, access);
      module.declare(NEAREST);
      module.declare(loadWeight(weight));
      if (scale !== 'f32') module.declare(narrowFunctions(scale));
      if (scale === 'f16' || weight === 'f16') module.declare(F16_TO_F32);
      return module.build(
        undefined,
        WG,
        `  ${elementIndex('params.count')}
  let row = i / params.units;
  let unit = i % params.units;
  let rowStart = row * params.k;
  let rowEnd = params.rowWords * ${layout.perWord}u;
  var zeroWord = 0u;
  for (var g = unit * ${perThread}u; g < min(params.groups, unit * ${perThread}u + ${perThread}u); g++) {
    let first = g * params.groupSize;
    let end = min(first + params.groupSize, rowEnd);
    let last = min(params.k, first + params.groupSize);
    ${start}
    var amax = 0.0;
    var bad = false;
    for (var c = first; c < last; c++) {
      let x = weight(rowStart + c);
      bad = bad || (bitcast<u32>(x) & 0x7f800000u) == 0x7f800000u;
  ${range}
    }
    ${scaleOf}
    let at = row * params.groups + g;
    ${storeScale(scale, 'scales', 'at', 'select(s, bitcast<f32>(nanBits), bad)')}
    ${offsets ? storeScale(scale, 'offsets', 'at', 'select(offset, bitcast<f32>(nanBits), bad)') : ''}
    ${zeros ? 'zeroWord = zeroWord | (select(u32(zero), 0u, bad) << ((g & 7u) * 4u));' : ''}
    ${
      q5
        ? `var high = 0u;
    `
        : ''
    }for (var word = first / ${layout.perWord}u; word < end / ${layout.perWord}u; word++) {
      var bits = 0u;
      for (var j = 0u; j < ${layout.perWord}u; j++) {
        let col = word * ${layout.perWord}u + j;
        let x = select(0.0, weight(rowStart + min(col, params.k - 1u)), col < last);
        var q = ${fallback};
        if (s > 0.0) { q = nearest(${t}, s) + zero; }
        q = clamp(q, ${lowest}, ${lowest + levels});
        bits = bits | ((bitcast<u32>(q) & ${mask}) << (j * ${codeShift}u));${
          q5
            ? `
        high = high | ((bitcast<u32>(q) >> 4u) << ((j / 2u) * 8u + (word - first / 8u) * 2u + j % 2u));`
            : ''
        }
      }
      packed[row * params.rowWords + word] = select(bits, 0u, bad);
    }${
      q5
        ? `
    packed[row * params.rowWords + params.groups * 4u + g] = select(high, 0u, bad);`
        : ''
    }
  }
  ${zeros ? 'zeros[row * params.zeroWords + unit] = zeroWord;' : ''}
  ${
    q5
      ? `if (unit == params.units - 1u) {
    for (var word = params.groups * 5u; word < params.rowWords; word++) { packed[row * params.rowWords + word] = 0u; }
  }`
      : layout.groupSize === 16
        ? `// q8g16: where K mod 32 is 1 to 16 the row ends in a padding half-block no group covers.
  if (unit == params.units - 1u) {
    for (var word = params.groups * 4u; word < params.rowWords; word++) { packed[row * params.rowWords + word] = 0u; }
  }`
        : ''
  }`,
      );
    },
  };
}

export const QUANTIZE_ROWS_KERNELS: readonly AnyWgpuKernel[] = [
  wgpuKernel(
    quantizeRows,
    (encoder, { inputs, outputs, attrs }) => {
      const w = inputs[0]!;
      const [n, kd] = w.shape as [number, number];
      const layout = quantLayout(attrs.format, kd);
      const units = attrs.zeroPoints ? layout.zeroWords : layout.groups;
      const [weight, scale] = [storageOf(w.dtype), storageOf(outputs[1]!.dtype)];
      const shader =
        attrs.format === 'q4k' || attrs.format === 'q5k' || attrs.format === 'q6k'
          ? quantizeSuperBlocksShader(attrs.format, weight, scale)
          : quantizeRowsShader(attrs.format, attrs.zeroPoints, weight, scale);
      // Rows are independent: a weight larger than one binding goes in pieces of whole rows, the
      // dense rows and their codes, scales, zero points and offsets in step (aligned pieces share no
      // word of half scales).
      const names = [
        'packed',
        'scales',
        ...(attrs.zeroPoints || layout.subBlockScales ? ['zeros'] : []),
        ...(layout.offsets ? ['offsets'] : []),
      ];
      const operands = { w, ...Object.fromEntries(outputs.map((o, i) => [names[i]!, o])) };
      for (const piece of rowPieces(encoder, quantizeRows.name, n, operands)) {
        const count = piece.count * units;
        encoder.dispatch({
          shader,
          buffers: [w, ...outputs].map((o) => rowsOf(o, n, piece)),
          params: {
            layout: QUANTIZE_PARAMS,
            values: {
              count,
              k: kd,
              units,
              groups: layout.groups,
              groupSize: layout.groupSize,
              rowWords: layout.rowWords,
              zeroWords: layout.zeroWords,
            },
          },
          workgroups: elementGrid(encoder, count),
        });
      }
    },
    // A weight larger than one binding is quantized in pieces of whole rows.
    { splitsLargeOperands: true, dtypes: FLOAT },
  ),
];
