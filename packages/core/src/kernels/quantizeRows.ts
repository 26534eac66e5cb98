import { bytesPerElement } from '../dtype.js';
import { defineKernel, type OutputMeta } from '../kernel.js';
import { Q4K_SUPER_BLOCK, QUANT_FORMATS, type QuantFormat, quantLayout } from '../quant/layout.js';
import { quantizeFinite, type ScaleDType } from '../quant/quantize.js';
import { ArgCheck } from './check.js';
import { bytesOf, FLOAT } from './vocabulary.js';

type QuantizeRowsAttrs = { format: QuantFormat; scaleDType: ScaleDType; zeroPoints: boolean };

/**
 * A dense weight [N, K] (f32, f16 or bf16) quantized to `format` on the
 * device: the outputs are the tensors `quantizedMatmul` takes (packed codes,
 * scales, then q4g32's and q4g128's zero points or q4k's, q5k's and q6k's
 * sub-block scales, then q4g32a's, q8g32a's, q5g32a's, q4k's and q5k's offsets), in
 * quant/layout.ts's layout; q4k, q5k and q6k take rows of whole super-blocks
 * (K a multiple of 256). The reference is the host quantizer
 * (`quantizeWeights`), whose arithmetic is f32 operations a device rounds
 * the same way (see quant/rounding.ts): a backend gives the same bits. A
 * group holding a weight that is not finite (which `quantizeWeights`
 * refuses) gets a NaN scale, NaN offset, codes 0 and zero point 0 (a q4k, q5k
 * or q6k super-block: NaN d and dmin, codes and sub-block scales 0), so that a
 * caller finds it by summing the scales.
 */
export const quantizeRows = defineKernel<QuantizeRowsAttrs>({
  name: 'quantizeRows',
  family: 'quantizeRows',
  summary:
    'quantizes a dense weight [N, K] to an int8, 6-, 5- or 4-bit format (codes, scales, zero points, sub-block scales or offsets)',
  inputs: [{ name: 'w', dtypes: FLOAT, doc: '[N, K]: a linear layer’s [out, in] weight' }],
  attributes: {
    format: { kind: 'enum', values: QUANT_FORMATS, doc: 'the layout to write' },
    scaleDType: { kind: 'enum', values: FLOAT, doc: 'how the scales (and offsets) are stored' },
    zeroPoints: {
      kind: 'boolean',
      default: false,
      doc: 'q4g32, q4g128: a zero point per group (asymmetric); else symmetric around 8',
    },
  },
  infer([w], { format, scaleDType, zeroPoints }) {
    const check = new ArgCheck('quantizeRows');
    check.rank('w', w!, 2, '[N, K]');
    const [n, k] = w!.shape as [number, number];
    check.shape(n > 0 && k > 0, 'w', 'a weight to quantize needs rows and columns', 'N, K >= 1', w!.shape);
    const layout = quantLayout(format, k);
    check.attr(
      !zeroPoints || layout.zeroPoints,
      'zeroPoints',
      `${format} has no zero points`,
      `false with ${format} (zero points are q4g32's and q4g128's)`,
      'true',
    );
    check.shape(
      !layout.subBlockScales || k % Q4K_SUPER_BLOCK === 0,
      'w',
      `${format} quantizes rows of whole super-blocks of ${Q4K_SUPER_BLOCK}`,
      `K a multiple of ${Q4K_SUPER_BLOCK}`,
      w!.shape,
    );
    const outputs: OutputMeta[] = [
      { name: 'packed', shape: [n, layout.rowWords], dtype: 'u32' },
      { name: 'scales', shape: [n, layout.groups], dtype: scaleDType },
    ];
    if (zeroPoints || layout.subBlockScales)
      outputs.push({ name: 'zeros', shape: [n, layout.zeroWords], dtype: 'u32' });
    if (layout.offsets) outputs.push({ name: 'offsets', shape: [n, layout.groups], dtype: scaleDType });
    return outputs;
  },
  reference([w], { format, scaleDType, zeroPoints }, io) {
    const [n, k] = io.inputs[0]!.shape as [number, number];
    const q = quantizeFinite(w!, n, k, format, zeroPoints, scaleDType);
    const outputs = [q.packed, q.scales];
    if (q.zeros) outputs.push(q.zeros);
    if (q.offsets) outputs.push(q.offsets);
    return outputs;
  },
  cost([w], { format, scaleDType, zeroPoints }) {
    const [n, k] = w!.shape as [number, number];
    const layout = quantLayout(format, k);
    const scaleBytes = bytesPerElement(scaleDType) * n * layout.groups;
    return {
      flops: 4 * n * k,
      bytes:
        bytesOf(w) +
        4 * n * layout.rowWords +
        scaleBytes * (layout.offsets ? 2 : 1) +
        (zeroPoints || layout.subBlockScales ? 4 * n * layout.zeroWords : 0),
    };
  },
});
