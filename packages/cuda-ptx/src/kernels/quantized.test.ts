import { QUANT_FORMATS, type QuantFormat, quantLayout } from '@rayo/core';
import { compareOutputs } from '@rayo/core/testing';
import { archJobs, expectAllAssembleCleanly, useEmulatedGpu } from '@rayo/cuda-testkit';
import { describe, expect, it } from 'vitest';
import { quantizedMatmulProblem, seededArrays } from '../../testing/quantizedMatmul.js';
import { ptxasTestGate } from '../ptx/ptxas.js';
import { QUANTIZED_KERNELS, quantDotModule } from './quantized.js';
import {
  QUANT_DOT_MAX_ROWS,
  type QuantDotVariant,
  type QuantVariant,
  quantDotKey,
  quantTileKey,
} from './quantizedCodes.js';
import { quantTileModule } from './quantizedTile.js';

const TYPES = [
  { act: 'f32', scale: 'f32' },
  { act: 'f32', scale: 'f16' },
  { act: 'bf16', scale: 'bf16' },
  { act: 'f16', scale: 'f16' },
] as const;

const variants: QuantVariant[] = QUANT_FORMATS.flatMap((format: QuantFormat) =>
  (quantLayout(format, 1).zeroPoints ? [false, true] : [false]).flatMap((zeros) =>
    TYPES.flatMap((types) => [false, true].map((withC) => ({ format, zeros, withC, types }))),
  ),
);
// Every row count with c on half the variants: c only adds the epilogue's load.
const dotVariants: QuantDotVariant[] = variants.flatMap((v) =>
  [1, 3, QUANT_DOT_MAX_ROWS]
    .filter((rows) => v.withC === (rows === 3))
    .flatMap((rows) => [true, false].map((vecX) => ({ ...v, rows, vecX }))),
);

// A folded norm (one and four rows, bf16 x and weights, scalar and vector x): the stagers' x² and the inverse RMS.
const normedDotVariants: QuantDotVariant[] = variants
  .filter((v) => v.types.act === 'bf16' && !v.withC && !v.zeros)
  .flatMap((v) => [1, QUANT_DOT_MAX_ROWS].map((rows) => ({ ...v, rows, vecX: rows === 1, norm: true })));

describe('quantized kernels', () => {
  it('implement quantizedMatmul for every float storage', () => {
    expect(QUANTIZED_KERNELS.map((k) => k.spec.name)).toEqual(['quantizedMatmul']);
    expect(QUANTIZED_KERNELS[0]!.dtypes).toEqual(['f32', 'f16', 'bf16']);
  });

  it('fold a norm into the streaming kernel: its own key, x² summed and the sums scaled by 1 / sqrt', () => {
    const normed = normedDotVariants[0]!;
    const plain = { ...normed, norm: false };
    expect(quantDotKey(normed)).not.toBe(quantDotKey(plain));
    const text = quantDotModule(normed).emit();
    expect(text).toContain('sqrt.rn.f32');
    expect(text).toContain('rcp.rn.f32');
    expect(quantDotModule(plain).emit()).not.toContain('sqrt');
  });

  it('read the codes as 16-byte words through the non-coherent cache, x from shared memory, no cvt', () => {
    const base = { zeros: false, withC: false, types: TYPES[1], rows: 1, vecX: true } as const;
    for (const format of QUANT_FORMATS) {
      const text = quantDotModule({ ...base, format }).emit();
      // One code word per lane and tile, loaded a tile ahead (the first before the loop); x staged
      // once per tile, read back as .v4 from shared memory.
      expect(text.match(/ld\.global\.nc\.v4\.b32/g)).toHaveLength(2);
      // q6k's lanes read their word's 8 bytes of high pairs beside it, q5k's 4 bytes of high bits.
      expect(text.match(/ld\.global\.nc\.v2\.b32/g) ?? []).toHaveLength(
        quantLayout(format, 1).bits === 6 ? 2 : 0,
      );
      expect(text.match(/ld\.shared\.v4\.f32/g)).toHaveLength(quantLayout(format, 1).bits === 8 ? 4 : 8);
      expect(text).not.toContain('cvt.rn.f32.s32');
      expect(text.match(/bar\.sync 0;/g)).toHaveLength(2);
      expect(text.match(/st\.global/g)).toHaveLength(1);
    }
    // q5k reads what q4k reads and, per tile, its word of high bits.
    const words = (format: QuantFormat) =>
      quantDotModule({ ...base, format })
        .emit()
        .match(/ld\.global\.nc\.b32/g)?.length ?? 0;
    expect(words('q5k')).toBe(words('q4k') + 2);
    // q5g32 and q5g32a: what q4g32 and q4g32a read and their group's word of high bits.
    expect(words('q5g32')).toBe(words('q4g32') + 2);
    expect(words('q5g32a')).toBe(words('q4g32a') + 2);
    const tile = quantTileModule({ format: 'q4g32', zeros: true, withC: true, types: TYPES[1] }).emit();
    expect(tile.match(/bar\.sync 0;/g)).toHaveLength(2);
  });

  it('name every variant in the key and refuse what they cannot take', () => {
    const keys = [...dotVariants.map(quantDotKey), ...variants.map(quantTileKey)];
    expect(new Set(keys).size).toBe(keys.length);
    expect(quantDotKey(dotVariants[0]!)).toBe('quantized/dot/m1/v4/q8');
    expect(() => quantDotModule({ ...dotVariants[0]!, rows: QUANT_DOT_MAX_ROWS + 1 })).toThrow(/rows/);
    expect(() => quantTileModule({ ...variants[0]!, zeros: true })).toThrow(/zero points/);
  });
});

const gate = ptxasTestGate();

describe.skipIf(gate.skip)(`quantized PTX assembles with ptxas, without spills (${gate.reason})`, () => {
  it('the streaming kernel for every format, row count, x layout and storage', () => {
    expectAllAssembleCleanly(
      [...dotVariants, ...normedDotVariants].flatMap((v) =>
        archJobs(quantDotModule(v).emit(), quantDotKey(v)),
      ),
    );
  }, 300_000);

  it('the tiled kernel for every format and storage', () => {
    expectAllAssembleCleanly(variants.flatMap((v) => archJobs(quantTileModule(v).emit(), quantTileKey(v))));
  }, 300_000);
});

// One SM: the lanes' loops over K run many times, the tiles step through K and past M and N.
describe('quantizedMatmul on a one-SM emulated device', () => {
  const { fake, gpu, cpu } = useEmulatedGpu({ multiprocessors: 1 });
  const random = seededArrays(7);

  for (const [format, zeroPoints, m, k, n] of [
    ['q4g32', false, 1, 4096, 19],
    ['q4g128', true, 3, 1000, 21],
    ['q8', false, 2, 515, 9],
    ['q4g32', true, 70, 96, 67],
    ['q8', false, 9, 64, 5],
    ['q8g32', false, 1, 1000, 19],
    ['q8g16', false, 2, 4113, 9],
    ['q8g16', false, 70, 81, 67],
    ['q8g32', false, 9, 200, 5],
    ['q4g32a', false, 1, 4096, 19],
    ['q4g32a', false, 3, 999, 21],
    ['q4g32a', false, 70, 96, 67],
    ['q8g32a', false, 1, 4096, 19],
    ['q8g32a', false, 3, 999, 21],
    ['q8g32a', false, 70, 96, 67],
    ['q4k', false, 1, 4096, 19],
    ['q4k', false, 3, 1024, 21],
    ['q4k', false, 70, 256, 67],
    ['q6k', false, 1, 4096, 19],
    ['q6k', false, 1, 768, 9],
    ['q6k', false, 3, 1024, 21],
    ['q6k', false, 70, 512, 67],
    ['q5k', false, 1, 4096, 19],
    ['q5k', false, 1, 768, 9],
    ['q5k', false, 3, 1024, 21],
    ['q5k', false, 70, 512, 67],
    ['q5g32', false, 1, 4096, 19],
    ['q5g32', false, 1, 70, 9],
    ['q5g32', false, 3, 999, 21],
    ['q5g32', false, 70, 96, 67],
    ['q5g32a', false, 1, 4096, 19],
    ['q5g32a', false, 2, 161, 9],
    ['q5g32a', false, 70, 161, 67],
  ] as const) {
    it(`${format}${zeroPoints ? ' zero points' : ''} ${m}×${k}→${n} from quantizeWeights`, async () => {
      const run = quantizedMatmulProblem(random, [format, zeroPoints, m, k, n]);
      const first = fake.launches.length;
      const got = run(gpu);
      expect(fake.launches.length - first).toBe(1);
      const want = run(cpu);
      expect(
        compareOutputs('f32', await got.read(), await want.read(), { rtol: 1e-4, atol: 4e-5 * Math.sqrt(k) }),
      ).toBeUndefined();
    });
  }
});
