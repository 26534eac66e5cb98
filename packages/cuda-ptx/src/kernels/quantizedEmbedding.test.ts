import {
  QUANT_FORMATS,
  type QuantFormat,
  type QuantizeOptions,
  quantizedEmbedding,
  quantizeWeights,
  quantLayout,
  type Tensor,
  uploadQuantized,
} from '@rayo/core';
import { expectAllAssembleCleanly, useEmulatedGpu, useInterpretedDevice } from '@rayo/cuda-testkit';
import { describe, expect, it } from 'vitest';
import { ptxasTestGate } from '../ptx/ptxas.js';
import { DEFAULT_TARGET } from '../ptx/target.js';
import { BLOCK } from './common.js';
import {
  QUANT_EMBEDDING_ENTRY,
  type QuantEmbeddingVariant,
  quantEmbeddingKey,
  quantEmbeddingModule,
} from './quantizedEmbedding.js';
import { QUANT_EMBEDDING_WORDS_ENTRY } from './quantizedEmbeddingWords.js';

const OUTS = ['f32', 'f16', 'bf16'] as const;

const variants: QuantEmbeddingVariant[] = QUANT_FORMATS.flatMap((format) =>
  (quantLayout(format, 1).zeroPoints ? [false, true] : [false]).flatMap((zeros) =>
    (['f32', 'f16', 'bf16'] as const).flatMap((scale) =>
      // A half y (a weight dequantized for a tensor-core product) with the scales as stored.
      OUTS.flatMap((out) => [false, true].map((words) => ({ format, zeros, scale, out, words }))),
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
  it('for every format, zero points, scale storage, y storage and path', () => {
    expectAllAssembleCleanly([
      ...variants.map((v) => ({
        ptx: quantEmbeddingModule(v).emit(),
        arch: DEFAULT_TARGET,
        what: quantEmbeddingKey(v),
      })),
      // bf16 words rounded by cvt, sm_80 and later.
      ...variants
        .filter((v) => v.words && v.out === 'bf16')
        .map((v) => ({ ...v, cvtBf16: true }))
        .map((v) => ({ ptx: quantEmbeddingModule(v).emit(), arch: 'sm_90', what: quantEmbeddingKey(v) })),
    ]);
  }, 120_000);
});

let seed = 11;
const random = (n: number, scale = 1) =>
  Float32Array.from({ length: n }, () => {
    seed = (seed * 16807) % 2147483647;
    return ((seed / 2147483647) * 2 - 1) * scale;
  });
const superBlocks = (format: QuantFormat) => quantLayout(format, 1).subBlockScales;

/**
 * y's bits, each NaN as one NaN: a NaN row's payload is the conversion's
 * (cvt's canonical f16 NaN on a device, the reference's own), every other value bit for bit.
 */
function bitsOf(to: (typeof OUTS)[number], y: Float32Array | Uint16Array): number[] {
  const [bits, inf] =
    to === 'f32'
      ? [new Uint32Array(y.buffer, y.byteOffset, y.length), 0x7f800000]
      : [y, to === 'f16' ? 0x7c00 : 0x7f80];
  const magnitude = to === 'f32' ? 0x7fffffff : 0x7fff;
  return Array.from(bits, (b) => ((b & magnitude) >>> 0 > inf ? Number.NaN : b));
}

describe('quantizedEmbedding on a one-SM emulated device: the reference’s bits', () => {
  const { gpu, cpu, fake } = useEmulatedGpu({ multiprocessors: 1 });
  const V = 37;
  const embed = (
    format: QuantFormat,
    d: number,
    ids: Int32Array,
    options: QuantizeOptions = {},
  ): ((to: (typeof OUTS)[number]) => Promise<[number[], number[]]>) => {
    const host = quantizeWeights(random(V * d, 0.1), [V, d], format, options);
    const run = async (backend: typeof gpu | typeof cpu, to: (typeof OUTS)[number]) => {
      const w = uploadQuantized(backend, host);
      const y = backend.run(
        quantizedEmbedding,
        [backend.upload(ids, [ids.length], 'i32'), w.packed, w.scales, w.zeros, w.offsets],
        { format, dim: d, to },
      )[0] as Tensor;
      return bitsOf(to, (await y.read()) as Float32Array | Uint16Array);
    };
    return async (to) => [await run(gpu, to), await run(cpu, to)];
  };

  // Rows that are not whole words of codes (301 values) take a thread per element.
  for (const format of QUANT_FORMATS.filter((f) => !superBlocks(f))) {
    it(`${format}, a thread per element`, async () => {
      const values = embed(format, 301, Int32Array.of(0, 36, 5, 37, -1, 12, 12, 30));
      for (const to of OUTS) {
        const [got, want] = await values(to);
        expect(fake.launches.at(-1)!.entry).toBe(QUANT_EMBEDDING_ENTRY);
        expect(got).toEqual(want);
      }
    });
  }

  // Whole words: a thread per word. 41 rows of 512 are more words (2624 of 8 values, 5248 of
  // 4) than the one SM's resident threads, so the grid-stride loop wraps; ids V and −1 give NaN rows.
  const ids = Int32Array.from({ length: 41 }, (_, r) => (r === 7 ? V : r === 20 ? -1 : (r * 11) % V));
  const scaleTypes = ['f32', 'f16', 'bf16'] as const;
  const wordCases: { format: QuantFormat; zeroPoints: boolean }[] = QUANT_FORMATS.flatMap((format) =>
    (quantLayout(format, 1).zeroPoints ? [false, true] : [false]).map((zeroPoints) => ({
      format,
      zeroPoints,
    })),
  );
  for (const { format, zeroPoints } of wordCases) {
    it(`${format}${zeroPoints ? ' with zero points' : ''}, a thread per word`, async () => {
      for (const [i, to] of OUTS.entries()) {
        const values = embed(format, 512, ids, { zeroPoints, scaleDType: scaleTypes[i] });
        const [got, want] = await values(to);
        const launch = fake.launches.at(-1)!;
        expect(launch.entry).toBe(QUANT_EMBEDDING_WORDS_ENTRY);
        expect(Number(launch.args.words)).toBeGreaterThan(launch.grid[0] * BLOCK);
        expect(got).toEqual(want);
      }
    });
  }
});

describe('quantizedEmbedding: a thread per word gives the element kernel’s bits', () => {
  // Both modules on the same buffers (f32 scales), compared word for word: this reaches
  // q4k's, q5k's and q6k's element kernel too, which the backend takes only for a misaligned y.
  // A negative NaN scale (with a payload) and a −∞ one in rows that are read give NaN values
  // in valid rows: their half bits (sign, quiet NaN) must be the element kernel's too.
  const device = useInterpretedDevice();
  const [V, d] = [9, 512];
  const ids = Int32Array.of(3, 0, 8, 9, -1, 5, 5);
  for (const format of QUANT_FORMATS) {
    it(format, () => {
      const layout = quantLayout(format, d);
      const zeros = layout.zeroPoints;
      const host = quantizeWeights(random(V * d, 0.1), [V, d], format, {
        zeroPoints: zeros,
        scaleDType: 'f32',
      });
      const bits = (a: ArrayLike<number> | undefined) =>
        a ? new Uint32Array((a as Float32Array | Uint32Array).slice().buffer) : new Uint32Array(1);
      const scaleBits = bits(host.scales);
      scaleBits[3 * layout.groups] = 0xffc12345;
      scaleBits[6 * layout.groups - 1] = 0xff800000;
      const buffers = {
        ids: device.buffer(new Uint32Array(ids.buffer.slice(0))),
        packed: device.buffer(host.packed),
        scales: device.buffer(scaleBits),
        zeros: device.buffer(bits(host.zeros)),
        offsets: device.buffer(bits(host.offsets)),
      };
      const common = {
        ids: buffers.ids.ptr,
        packed: buffers.packed.ptr,
        scales: buffers.scales.ptr,
        zeros: buffers.zeros.ptr,
        offsets: buffers.offsets.ptr,
        vocab: V,
        rowWords: layout.rowWords,
        groups: layout.groups,
        zeroWords: layout.zeroWords,
      };
      const total = ids.length * d;
      for (const out of OUTS) {
        const variant = { format, zeros, scale: 'f32', out } as const;
        const words = out === 'f32' ? total : total / 2;
        const run = (path: boolean) => {
          const y = device.buffer(words);
          const v = { ...variant, words: path };
          const items = path ? total / layout.perWord : total;
          // One block: the grid-stride loop wraps on both paths.
          device.launch(
            () => quantEmbeddingModule(v),
            path ? QUANT_EMBEDDING_WORDS_ENTRY : QUANT_EMBEDDING_ENTRY,
            { grid: 1, block: BLOCK },
            path
              ? { ...common, y: y.ptr, words: items, yRowWords: d / layout.perWord }
              : { ...common, y: y.ptr, total: items, dim: d },
          );
          return device.read(y, words);
        };
        expect(run(true)).toEqual(run(false));
      }
    });
  }
});
