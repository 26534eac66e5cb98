import { FLOAT, gateUpOperands, isQgemvFormat, qgemvPairVariant, quantizedGateUpSwiglu } from '@rayo/core';
import { type AnyWgpuKernel, wgpuKernel } from '../kernel.js';
import { productPieces } from '../rowPieces.js';
import { encodeWithF32Activations } from './halfEdges.js';
import { normedF32 } from './normalization.js';
import { streamsRows } from './quantized.js';
import { encodeGateUpInParts } from './quantizedGateUpParts.js';
import { encodeQuantizedGemvF32 } from './quantizedGemv.js';

/** The gate·up·SwiGLU pair of a decode step: quantizedGemv.ts's shader with two weights, any M (other formats in parts, see quantizedGateUpParts.ts). */
export const QUANTIZED_GATE_UP_KERNELS: readonly AnyWgpuKernel[] = [
  wgpuKernel(
    quantizedGateUpSwiglu,
    (encoder, { inputs, outputs, attrs }) => {
      const { x: xIn, gate: gateWeight, up: upWeight, normWeight } = gateUpOperands(inputs);
      // The pair shader reads q8, q4g32 and q4g128; the other formats take their two products, whose
      // streaming shader folds a norm. Elsewhere the norm is taken first, into f32 scratch.
      const parts = !isQgemvFormat(attrs.format);
      const folds = normWeight !== undefined && parts && streamsRows(encoder, xIn.shape[0]!, attrs.format);
      const x =
        normWeight && !folds
          ? normedF32(encoder, xIn, normWeight, attrs.eps, quantizedGateUpSwiglu.name)
          : xIn;
      const widen = { x, normWeight: folds ? normWeight : undefined };
      encodeWithF32Activations(encoder, quantizedGateUpSwiglu.name, widen, { y: outputs[0] }, (i, o) => {
        if (parts) {
          encodeGateUpInParts(
            encoder,
            {
              x: i.x!,
              gate: { ...gateWeight },
              up: { ...upWeight },
              y: o.y!,
              norm: i.normWeight ? { weight: i.normWeight, eps: attrs.eps } : undefined,
            },
            attrs,
          );
          return;
        }
        const gate = {
          gatePacked: gateWeight.packed,
          gateScales: gateWeight.scales,
          gateZeros: gateWeight.zeros,
        };
        const up = { upPacked: upWeight.packed, upScales: upWeight.scales, upZeros: upWeight.zeros };
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
