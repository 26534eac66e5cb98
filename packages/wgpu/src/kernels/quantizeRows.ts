import { codeRange, FLOAT, type QuantFormat, quantizeRows, quantLayout, reciprocalOf } from '@rayo/core';
import { type AnyWgpuKernel, wgpuKernel } from '../kernel.js';
import { paramLayout } from '../params.js';
import { rowPieces, rowsOf } from '../rowPieces.js';
import { F16_TO_F32, narrowFunctions, type Storage, storageOf } from '../wgsl/half.js';
import { ShaderModule, type WgslType } from '../wgsl/module.js';
import { elementGrid, elementIndex, WG } from './common.js';

// quantizeRows: a dense weight [N, K] to one of core's quantized layouts
// (quant/layout.ts), bit for bit as the host quantizer (quant/rounding.ts):
// an invocation per group (per 8 groups with zero points, whose nibbles share
// a word), reading its group twice: for the range, then to write the codes
// word by word. Scales are range · f32(1 / levels) (a correctly rounded
// product) rounded to their storage by integer code. WGSL's division is not
// correctly rounded, so a code starts from the rounded quotient and is fixed
// by the exact sign of t − (q ± ½) · scale: scale split into two halves of 12
// bits makes both products exact, and t minus the first is exact wherever the
// sign is in doubt. Half scales (and offsets) share a u32 word with a
// neighbouring group's: each invocation clears and sets its own half with
// atomics, so no word needs zeroing first. A group with a weight that is not
// finite writes a NaN scale (and offset), codes 0 and zero point 0.

const PARAMS = paramLayout([
  ['count', 'u32'],
  ['k', 'u32'],
  ['units', 'u32'],
  ['groups', 'u32'],
  ['groupSize', 'u32'],
  ['rowWords', 'u32'],
  ['zeroWords', 'u32'],
] as const);

/** The integer nearest to t / s, ties up, for s > 0 (exact; see the note above). */
const NEAREST = `fn nearest(t: f32, s: f32) -> i32 {
  let q = round(t / s);
  let sh = bitcast<f32>(bitcast<u32>(s) & 0xfffff000u);
  let sl = s - sh;
  let up = q + 0.5;
  let down = q - 0.5;
  var r = i32(q);
  if (t - up * sh >= up * sl) { r = r + 1; } else if (t - down * sh < down * sl) { r = r - 1; }
  return r;
}
fn positive_zero(x: f32) -> f32 { return select(x, 0.0, x == 0.0); }
// Runtime values: a constant expression may not be NaN or infinite.
var<private> nanBits: u32 = 0x7fc00000u;
var<private> infBits: u32 = 0x7f800000u;`;

function loadWeight(weight: Storage): string {
  if (weight === 'f32') return 'fn weight(i: u32) -> f32 { return w[i]; }';
  const half = '(w[i >> 1u] >> ((i & 1u) * 16u)) & 0xffffu';
  return weight === 'f16'
    ? `fn weight(i: u32) -> f32 { return bitcast<f32>(f16_to_f32(${half})); }`
    : `fn weight(i: u32) -> f32 { return bitcast<f32>((${half}) << 16u); }`;
}

/** Stores scale-like value v at element `at` of `array` in `scale` storage. */
function storeScale(scale: Storage, array: string, at: string, v: string): string {
  if (scale === 'f32') return `${array}[${at}] = ${v};`;
  return `{
    let shift = (${at} & 1u) * 16u;
    atomicAnd(&${array}[${at} >> 1u], ~(0xffffu << shift));
    atomicOr(&${array}[${at} >> 1u], to_${scale}(${v}) << shift);
  }`;
}

export function quantizeRowsShader(format: QuantFormat, zeros: boolean, weight: Storage, scale: Storage) {
  const layout = quantLayout(format, 1);
  const offsets = layout.offsets;
  const { lowest, levels } = codeRange(layout);
  const perThread = zeros ? 8 : 1;
  const scaleType: WgslType = scale === 'f32' ? 'f32' : 'atomic<u32>';
  const f = (x: number) =>
    Number.isInteger(x) ? `${x}.0` : `bitcast<f32>(${new Uint32Array(new Float32Array([x]).buffer)[0]}u)`;
  // A value as its storage keeps it.
  const stored = (value: string) => {
    if (scale === 'f32') return value;
    const bits = `to_${scale}(${value})`;
    return scale === 'f16' ? `bitcast<f32>(f16_to_f32(${bits}))` : `bitcast<f32>(${bits} << 16u)`;
  };
  const stepOf = (range: string, n: number) => stored(`(${range}) * ${f(reciprocalOf(n))}`);
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
    let offset = ${stored(lowest === 0 ? '-low' : `-(ldexp(s, ${Math.log2(-lowest)}) + low)`)};
    var zero = 0;`
    : zeros
      ? `let low = positive_zero(lo);
    let s = ${stepOf('positive_zero(hi) - low', 15)};
    var zero = 0;
    if (s > 0.0) { zero = min(15, nearest(-low, s)); }`
      : `let s = ${stepOf('amax', layout.bits === 8 ? 127 : 7)};
    let zero = ${layout.bits === 8 ? 0 : 8};`;
  const t = offsets ? 'x + offset' : 'x';
  const fallback = offsets ? `${lowest}` : 'zero';
  const mask = layout.bits === 8 ? '0xffu' : '0xfu';
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
      const module = new ShaderModule().params(PARAMS);
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
    for (var word = first / ${layout.perWord}u; word < end / ${layout.perWord}u; word++) {
      var bits = 0u;
      for (var j = 0u; j < ${layout.perWord}u; j++) {
        let col = word * ${layout.perWord}u + j;
        let x = select(0.0, weight(rowStart + min(col, params.k - 1u)), col < last);
        var q = ${fallback};
        if (s > 0.0) { q = nearest(${t}, s) + zero; }
        q = clamp(q, ${lowest}, ${lowest + levels});
        bits = bits | ((bitcast<u32>(q) & ${mask}) << (j * ${layout.bits}u));
      }
      packed[row * params.rowWords + word] = select(bits, 0u, bad);
    }
  }
  ${zeros ? 'zeros[row * params.zeroWords + unit] = zeroWord;' : ''}
  ${
    layout.groupSize === 16
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
      const shader = quantizeRowsShader(
        attrs.format,
        attrs.zeroPoints,
        storageOf(w.dtype),
        storageOf(outputs[1]!.dtype),
      );
      // Rows are independent: a weight larger than one binding goes in pieces of whole rows, the
      // dense rows and their codes, scales, zero points and offsets in step (aligned pieces share no
      // word of half scales).
      const names = [
        'packed',
        'scales',
        ...(attrs.zeroPoints ? ['zeros'] : []),
        ...(layout.offsets ? ['offsets'] : []),
      ];
      const operands = { w, ...Object.fromEntries(outputs.map((o, i) => [names[i]!, o])) };
      for (const piece of rowPieces(encoder, quantizeRows.name, n, operands)) {
        const count = piece.count * units;
        encoder.dispatch({
          shader,
          buffers: [w, ...outputs].map((o) => rowsOf(o, n, piece)),
          params: {
            layout: PARAMS,
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
