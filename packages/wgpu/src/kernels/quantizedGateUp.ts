import { FLOAT, isQgemvFormat, qgemvPairVariant, quantizedGateUpSwiglu } from '@rayo/core';
import { type AnyWgpuKernel, wgpuKernel } from '../kernel.js';
import { productPieces } from '../rowPieces.js';
import { encodeWithF32Activations } from './halfEdges.js';
import { encodeGateUpInParts } from './quantizedGateUpParts.js';
import { encodeQuantizedGemvF32 } from './quantizedGemv.js';

/** The gate·up·SwiGLU pair of a decode step: quantizedGemv.ts's shader with two weights, any M (other formats in parts, see quantizedGateUpParts.ts). */
export const QUANTIZED_GATE_UP_KERNELS: readonly AnyWgpuKernel[] = [
  wgpuKernel(
    quantizedGateUpSwiglu,
    (encoder, { inputs, outputs, attrs }) => {
      const [x, gatePacked, gateScales, upPacked, upScales, gateZeros, upZeros, gateOffsets, upOffsets] =
        inputs;
      encodeWithF32Activations(encoder, quantizedGateUpSwiglu.name, { x }, { y: outputs[0] }, (i, o) => {
        // The pair shader reads q8, q4g32 and q4g128; the other formats take their two products.
        if (!isQgemvFormat(attrs.format)) {
          encodeGateUpInParts(
            encoder,
            {
              x: i.x!,
              gate: { packed: gatePacked!, scales: gateScales!, zeros: gateZeros, offsets: gateOffsets },
              up: { packed: upPacked!, scales: upScales!, zeros: upZeros, offsets: upOffsets },
              y: o.y!,
            },
            attrs.format,
          );
          return;
        }
        const gate = { gatePacked: gatePacked!, gateScales: gateScales!, gateZeros };
        const up = { upPacked: upPacked!, upScales: upScales!, upZeros };
        // Weights larger than one binding: both in step, a dispatch per piece of whole rows.
        const pieces = productPieces(encoder, quantizedGateUpSwiglu.name, {
          x: i.x!,
          c: undefined,
          y: o.y!,
          weights: [gate, up],
        });
        for (const piece of pieces) {
          const [g, u] = piece.weights as [typeof gate, typeof up];
          encodeQuantizedGemvF32(
            encoder,
            // Variant a has no pair shader: it leaves the pair to the default.
            qgemvPairVariant(encoder.tuning.qgemvVariant),
            {
              x: piece.x,
              weights: [
                { packed: g.gatePacked, scales: g.gateScales, zeros: g.gateZeros },
                { packed: u.upPacked, scales: u.upScales, zeros: u.upZeros },
              ],
              c: undefined,
              y: piece.y,
              columns: piece.columns,
            },
            { format: attrs.format, beta: 0 },
          );
        }
      });
    },
    // x and y in f32, f16 or bf16 (halves through f32 scratch); the scales in any of them, read as stored.
    // Weights larger than one binding are bound in pieces of whole rows.
    { splitsLargeOperands: true, dtypes: FLOAT },
  ),
];
