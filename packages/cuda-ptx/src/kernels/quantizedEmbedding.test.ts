import {
  QUANT_FORMATS,
  quantizedEmbedding,
  quantizeWeights,
  quantLayout,
  type Tensor,
  uploadQuantized,
} from '@rayo/core';
import { expectAllAssembleCleanly, useEmulatedGpu } from '@rayo/cuda-testkit';
import { describe, expect, it } from 'vitest';
import { ptxasTestGate } from '../ptx/ptxas.js';
import { DEFAULT_TARGET } from '../ptx/target.js';
import { type QuantEmbeddingVariant, quantEmbeddingKey, quantEmbeddingModule } from './quantizedEmbedding.js';

const variants: QuantEmbeddingVariant[] = QUANT_FORMATS.flatMap((format) =>
  (quantLayout(format, 1).zeroPoints ? [false, true] : [false]).flatMap((zeros) =>
    (['f32', 'f16', 'bf16'] as const).flatMap((scale) =>
      // A half y (a weight dequantized for a tensor-core product) with the scales as stored.
      (['f32', 'f16', 'bf16'] as const).map((out) => ({ format, zeros, scale, out })),
    ),
  ),
);

describe('quantized embedding kernel', () => {
  it('names every variant in its key', () => {
    const keys = variants.map(quantEmbeddingKey);
    expect(new Set(keys).size).toBe(keys.length);
  });
});

const gate = ptxasTestGate();

describe.skipIf(gate.skip)(`quantized embedding PTX assembles with ptxas (${gate.reason})`, () => {
  it('for every format, zero points and scale storage', () => {
    expectAllAssembleCleanly(
      variants.map((v) => ({
        ptx: quantEmbeddingModule(v).emit(),
        arch: DEFAULT_TARGET,
        what: quantEmbeddingKey(v),
      })),
    );
  }, 120_000);
});

describe('quantizedEmbedding on a one-SM emulated device: the reference’s bits', () => {
  const { gpu, cpu } = useEmulatedGpu({ multiprocessors: 1 });
  let seed = 11;
  const random = (n: number, scale = 1) =>
    Float32Array.from({ length: n }, () => {
      seed = (seed * 16807) % 2147483647;
      return ((seed / 2147483647) * 2 - 1) * scale;
    });
  for (const format of QUANT_FORMATS) {
    it(format, async () => {
      // q4k's rows are whole super-blocks of 256.
      const [v, d] = [37, quantLayout(format, 1).subBlockScales ? 512 : 300];
      const host = quantizeWeights(random(v * d, 0.1), [v, d], format);
      const ids = Int32Array.of(0, 36, 5, 37, -1, 12, 12, 30);
      const run = async (backend: typeof gpu | typeof cpu) => {
        const w = uploadQuantized(backend, host);
        const y = backend.run(
          quantizedEmbedding,
          [backend.upload(ids, [8], 'i32'), w.packed, w.scales, w.zeros, w.offsets],
          { format, dim: d },
        )[0] as Tensor;
        return Array.from(await y.read());
      };
      expect(await run(gpu)).toEqual(await run(cpu));
    });
  }
});
