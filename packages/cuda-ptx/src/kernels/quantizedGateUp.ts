import { FLOAT, qgemvPairVariant, quantizedGateUpSwiglu } from '@rayo/core';
import { type AnyCudaKernel, cudaKernel } from '../kernel.js';
import { checkElementCount } from './common.js';
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
      const [x, gatePacked, gateScales, upPacked, upScales, gateZeros, upZeros, gateOffsets, upOffsets] =
        inputs;
      const y = outputs[0]!;
      checkElementCount(quantizedGateUpSwiglu.name, 'x', x!.size);
      checkElementCount(quantizedGateUpSwiglu.name, 'gatePacked', gatePacked!.size * 8);
      checkElementCount(quantizedGateUpSwiglu.name, 'y', y.size);
      const gate = { packed: gatePacked!, scales: gateScales!, zeros: gateZeros, offsets: gateOffsets };
      const up = { packed: upPacked!, scales: upScales!, zeros: upZeros, offsets: upOffsets };
      const problem = { m: x!.shape[0]!, k: x!.shape[1]!, format: attrs.format, x: x!.ptr };
      const int8 = { x: x!, weights: [gate, up], c: undefined, y };
      if (encodeQuantizedGemvInt8(encoder, int8, { format: attrs.format, beta: 0 })) return;
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
