import { FLOAT, gateUpOperands, qgemvPairVariant, quantizedGateUpSwiglu } from '@rayo/core';
import { type AnyCudaKernel, cudaKernel } from '../kernel.js';
import { checkElementCount } from './common.js';
import { normedScratch } from './normalization.js';
import { encodeQuantizedGemv } from './quantizedGemv.js';
import { encodeQuantizedGemvInt8 } from './quantizedGemvInt8.js';
import { encodeQuantizedMma, qmmaApplies } from './quantizedMma.js';

/**
 * The gate·up·SwiGLU pair of a decode step: the small-M GEMV with two
 * weights, any M (4 rows per block) — the int8 one where the
 * qgemvActivations switch asks, one-row q4g32 on tensor cores where the
 * qgemvMma switch asks, else quantizedGemv.ts's.
 */
export const QUANTIZED_GATE_UP_KERNELS: readonly AnyCudaKernel[] = [
  cudaKernel(
    quantizedGateUpSwiglu,
    (encoder, { inputs, outputs, attrs }) => {
      const { x: xIn, gate, up, normWeight } = gateUpOperands(inputs);
      const y = outputs[0]!;
      checkElementCount(quantizedGateUpSwiglu.name, 'x', xIn.size);
      checkElementCount(quantizedGateUpSwiglu.name, 'gatePacked', gate.packed.size * 8);
      checkElementCount(quantizedGateUpSwiglu.name, 'y', y.size);
      const norm = normWeight ? { weight: normWeight, eps: attrs.eps } : undefined;
      // The int8 GEMV folds a norm; the other kernels take x normed first.
      const int8 = { x: xIn, weights: [gate, up], c: undefined, y, norm };
      if (encodeQuantizedGemvInt8(encoder, int8, { ...attrs, beta: 0 })) return;
      const x = norm ? normedScratch(encoder, xIn, norm.weight, norm.eps) : xIn;
      const problem = { m: x!.shape[0]!, k: x!.shape[1]!, format: attrs.format, x: x!.ptr };
      // One row of q4g32 pairs: the tensor-core GEMV where the qgemvMma switch asks.
      if (
        encoder.tuning.qgemvMma === 'on' &&
        attrs.format === 'q4g32' &&
        qmmaApplies(encoder.device, problem)
      ) {
        encodeQuantizedMma(
          encoder,
          { x: x!, weights: [gate, up], c: undefined, y },
          { format: 'q4g32', beta: 0 },
        );
        return;
      }
      // Variant a has no pair kernel: it leaves the pair to the default.
      encodeQuantizedGemv(
        encoder,
        qgemvPairVariant(encoder.tuning.qgemvVariant),
        {
          x: x!,
          weights: [gate, up],
          c: undefined,
          y,
        },
        { format: attrs.format, beta: 0 },
      );
    },
    // x and y in f32, f16 or bf16; the scales of both weights in one of them (summed in f32).
    { dtypes: FLOAT },
  ),
];
