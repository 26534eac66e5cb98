import { defineKernel, type TensorMeta } from '../kernel.js';
import { Q4K_SUPER_BLOCK, type QuantFormat, quantLayout } from '../quant/layout.js';
import { dequantizeInto } from '../quant/quantize.js';
import { siluOf } from './activations.js';
import { ArgCheck } from './check.js';
import {
  ACTIVATIONS_ATTR,
  checkNormWeight,
  NORM_WEIGHT_INPUT,
  normedRows,
  OPTIONAL_NORM_EPS,
  type QuantActivations,
} from './foldedNorm.js';
import { SCALES } from './quantized.js';
import { bytesOf, FLOAT } from './vocabulary.js';

/**
 * The formats the fused product takes: those of 8- and 4-bit codes (int8
 * rows, groups with or without offsets, q4k: GGUF's Q8_0, Q4_0, Q4_1, Q4_K
 * and the rest; see quant/layout.ts), not q6k's or q5k's.
 */
export const GATE_UP_FORMATS = [
  'q8',
  'q4g32',
  'q4g128',
  'q8g32',
  'q8g16',
  'q4g32a',
  'q8g32a',
  'q4k',
] as const satisfies readonly QuantFormat[];
export type GateUpFormat = (typeof GATE_UP_FORMATS)[number];

export function isGateUpFormat(format: string): format is GateUpFormat {
  return (GATE_UP_FORMATS as readonly string[]).includes(format);
}

/** One weight's operands of the gate·up spec. */
export interface GateUpWeight<T> {
  readonly packed: T;
  readonly scales: T;
  readonly zeros: T | undefined;
  readonly offsets: T | undefined;
}

/** The spec's positional inputs (tensors, or a backend's operands), by name. */
export function gateUpOperands<T>(inputs: readonly (T | undefined)[]): {
  readonly x: T;
  readonly gate: GateUpWeight<T>;
  readonly up: GateUpWeight<T>;
  readonly normWeight: T | undefined;
} {
  const [
    x,
    gatePacked,
    gateScales,
    upPacked,
    upScales,
    gateZeros,
    upZeros,
    gateOffsets,
    upOffsets,
    normWeight,
  ] = inputs;
  return {
    x: x!,
    gate: { packed: gatePacked!, scales: gateScales!, zeros: gateZeros, offsets: gateOffsets },
    up: { packed: upPacked!, scales: upScales!, zeros: upZeros, offsets: upOffsets },
    normWeight,
  };
}

/** The spec's positional inputs from x, both weights and an optional norm weight (the inverse of gateUpOperands). */
export function gateUpInputs<T>(
  x: T,
  gate: GateUpWeight<T>,
  up: GateUpWeight<T>,
  normWeight?: T,
): (T | undefined)[] {
  return [
    x,
    gate.packed,
    gate.scales,
    up.packed,
    up.scales,
    gate.zeros,
    up.zeros,
    gate.offsets,
    up.offsets,
    normWeight,
  ];
}

/**
 * y = silu(x · dequant(Wg)ᵀ) ⊙ (x · dequant(Wu)ᵀ) for a gate and an up
 * weight [N, K] in one quantized format: a decoder's gate, up and SwiGLU in
 * one pass over both weights, without writing the two products. Sums are
 * f32 on a backend; the reference dequantizes exactly and sums in f64, as
 * `quantizedMatmul`'s does, then takes silu and the product in f64. With
 * `normWeight`, x̂ = rmsNorm(x, normWeight, eps) replaces x, folded into the
 * products (see foldedNorm.ts): the norm before a decoder's MLP.
 * `activations: 'int8'` lets a backend take x̂ as int8 blocks (see
 * ACTIVATIONS_ATTR); the reference is exact either way.
 */
export const quantizedGateUpSwiglu = defineKernel<{
  format: GateUpFormat;
  eps: number;
  activations: QuantActivations;
}>({
  name: 'quantizedGateUpSwiglu',
  family: 'quantized',
  summary:
    'y = silu(x · dequant(Wg)ᵀ) ⊙ (x · dequant(Wu)ᵀ) for int8, 4-bit or q4k gate and up weights [N, K]',
  inputs: [
    { name: 'x', dtypes: FLOAT, doc: '[M, K]: M rows (1 when decoding)' },
    { name: 'gatePacked', dtypes: ['u32'], doc: "[N, rowWords(K)]: the gate's codes, see quantLayout" },
    { name: 'gateScales', dtypes: FLOAT, dtypeGroup: SCALES, doc: '[N, groups(K)]' },
    { name: 'upPacked', dtypes: ['u32'], doc: "[N, rowWords(K)]: the up weight's codes" },
    {
      name: 'upScales',
      dtypes: FLOAT,
      dtypeGroup: SCALES,
      doc: '[N, groups(K)], stored as the gate scales are',
    },
    {
      name: 'gateZeros',
      dtypes: ['u32'],
      optional: true,
      doc: "[N, zeroWords]: q4 zero-point nibbles, given with 'upZeros' or not at all; q4k's 6-bit sub-block scales and mins (required)",
    },
    { name: 'upZeros', dtypes: ['u32'], optional: true, doc: "[N, zeroWords], with 'gateZeros'" },
    {
      name: 'gateOffsets',
      dtypes: FLOAT,
      dtypeGroup: SCALES,
      optional: true,
      doc: "[N, groups(K)]: q4g32a's, q8g32a's and q4k's offsets (q4k: dmin; required there, refused elsewhere)",
    },
    {
      name: 'upOffsets',
      dtypes: FLOAT,
      dtypeGroup: SCALES,
      optional: true,
      doc: "[N, groups(K)], with 'gateOffsets'",
    },
    NORM_WEIGHT_INPUT,
  ],
  attributes: {
    format: { kind: 'enum', values: GATE_UP_FORMATS, doc: 'how both weights are stored' },
    eps: OPTIONAL_NORM_EPS,
    activations: ACTIVATIONS_ATTR,
  },
  infer(
    [x, gatePacked, gateScales, upPacked, upScales, gateZeros, upZeros, gateOffsets, upOffsets, normWeight],
    { format },
  ) {
    const check = new ArgCheck('quantizedGateUpSwiglu');
    check.rank('x', x!, 2, '[M, K]');
    const [m, k] = x!.shape as [number, number];
    check.shape(k > 0, 'x', 'a quantized product needs rows of at least one element', 'K >= 1', x!.shape);
    const layout = quantLayout(format, k);
    check.shape(
      !layout.subBlockScales || k % Q4K_SUPER_BLOCK === 0,
      'x',
      `${format} rows are whole super-blocks of ${Q4K_SUPER_BLOCK}`,
      `K a multiple of ${Q4K_SUPER_BLOCK}`,
      x!.shape,
    );
    check.rank('gatePacked', gatePacked!, 2, '[N, rowWords]');
    const n = gatePacked!.shape[0]!;
    check.dim('gatePacked', gatePacked!, 1, layout.rowWords, `the u32 words of a ${format} row of K = ${k}`);
    check.sameShape('upPacked', upPacked!, gatePacked!.shape, "'gatePacked': both weights are [N, K]");
    check.sameShape('gateScales', gateScales!, [n, layout.groups], `[N, groups] of ${format} for K = ${k}`);
    check.sameShape('upScales', upScales!, [n, layout.groups], `[N, groups] of ${format} for K = ${k}`);
    check.shape(
      (gateZeros === undefined) === (upZeros === undefined),
      gateZeros ? 'upZeros' : 'gateZeros',
      'the gate and up weights take zero points together or not at all',
      'both or neither',
      'one of them',
    );
    for (const [name, zeros] of [
      ['gateZeros', gateZeros],
      ['upZeros', upZeros],
    ] as const) {
      if (!zeros) continue;
      check.shape(
        layout.zeroPoints || layout.subBlockScales,
        name,
        `${format} takes no zero points`,
        `nothing with ${format} (zero points are q4g32's and q4g128's)`,
        zeros.shape,
      );
      check.sameShape(
        name,
        zeros,
        [n, layout.zeroWords],
        layout.subBlockScales
          ? '[N, 3 · groups] words of 6-bit scales and mins'
          : '[N, ceil(groups / 8)] nibble words',
      );
    }
    if (layout.subBlockScales) {
      check.shape(
        gateZeros !== undefined,
        'gateZeros',
        `${format} needs its sub-block 6-bit scales and mins`,
        `[N, 3 · groups] = [${n}, ${layout.zeroWords}] for both weights`,
        'absent',
      );
    }
    for (const [name, offsets] of [
      ['gateOffsets', gateOffsets],
      ['upOffsets', upOffsets],
    ] as const) {
      check.shape(
        layout.offsets === (offsets !== undefined),
        name,
        layout.offsets ? `${format} needs its dmin per super-block` : `${format} takes no offsets`,
        layout.offsets ? `[N, groups] = [${n}, ${layout.groups}]` : 'nothing',
        offsets?.shape ?? 'absent',
      );
      if (offsets)
        check.sameShape(name, offsets, [n, layout.groups], `[N, groups] of ${format} for K = ${k}`);
    }
    if (normWeight) checkNormWeight(check, x!, normWeight);
    return [{ name: 'y', shape: [m, n], dtype: x!.dtype }];
  },
  reference(
    [xIn, gatePacked, gateScales, upPacked, upScales, gateZeros, upZeros, gateOffsets, upOffsets, normWeight],
    { format, eps },
    io,
  ) {
    const [m, k] = io.inputs[0]!.shape as [number, number];
    const x = normedRows(xIn!, normWeight, eps, m, k);
    const n = io.outputs[0]!.shape[1]!;
    const layout = quantLayout(format, k);
    const gate = new Float64Array(n * k);
    const up = new Float64Array(n * k);
    dequantizeInto(gate, gatePacked!, gateScales!, gateZeros, layout, n, k, gateOffsets);
    dequantizeInto(up, upPacked!, upScales!, upZeros, layout, n, k, upOffsets);
    const y = new Float32Array(m * n);
    for (let i = 0; i < m; i++) {
      for (let j = 0; j < n; j++) {
        let g = 0;
        let u = 0;
        for (let p = 0; p < k; p++) {
          const xv = x[i * k + p]!;
          g += xv * gate[j * k + p]!;
          u += xv * up[j * k + p]!;
        }
        y[i * n + j] = siluOf(g) * u;
      }
    }
    return [y];
  },
  cost(inputs) {
    const { x, gate, up, normWeight } = gateUpOperands(inputs);
    const [m, k] = x.shape as [number, number];
    const n = gate.packed.shape[0]!;
    const weightBytes = (w: GateUpWeight<TensorMeta>) =>
      bytesOf(w.packed) + bytesOf(w.scales) + bytesOf(w.zeros) + bytesOf(w.offsets);
    return {
      flops: 4 * m * n * k + 6 * m * n + (normWeight ? 3 * m * k : 0),
      bytes:
        bytesOf(x) +
        bytesOf(normWeight) +
        weightBytes(gate) +
        weightBytes(up) +
        bytesOf({ shape: [m, n], dtype: x.dtype }),
    };
  },
});
