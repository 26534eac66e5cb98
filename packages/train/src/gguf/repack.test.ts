import {
  createCpuBackend,
  DTypeError,
  dequantizeWeights,
  f16BitsToF32,
  matmul,
  type QuantFormat,
  q5kCode,
  q6kCode,
  quantizedMatmul,
  quantLayout,
  ShapeError,
} from '@rayo/core';
import { describe, expect, it } from 'vitest';
import { Rng } from '../random.js';
import { dequantize, q5kValues, q6kValues } from './dequantize.js';
import { GGML_TYPES } from './ggmlTypes.js';
import { quantize } from './quantize.js';
import {
  ggufAsCoreFormat,
  q4_0AsQ4g32,
  q4_KAsQ4g32a,
  q5_0AsQ8g32,
  q5_1AsQ8g32a,
  q5_KAsQ8g32a,
  q6_KAsQ8g16,
  type RepackedWeight,
  refuseQuantized,
  repackOntoCoreFormats,
  repackQ4_0,
  repackQ4_K,
  repackQ4_KSuperBlocks,
  repackQ5_KSuperBlocks,
  repackQ6_K,
  repackQ6_KSuperBlocks,
  repackQ8_0,
} from './repack.js';

function randomBlocks(type: 'Q8_0' | 'Q4_0' | 'Q4_K' | 'Q5_K' | 'Q6_K', seed: number): Uint8Array {
  const rng = new Rng(seed);
  return quantize(
    type,
    Float32Array.from({ length: 3 * 256 }, (_, i) => rng.uniform(-1, 1) * (1 + (i % 5))),
  );
}

const nibble = (bytes: Uint8Array, i: number) => (i % 2 === 0 ? bytes[i >> 1]! & 0xf : bytes[i >> 1]! >> 4);

describe('host repacks of quantized blocks', () => {
  it('Q8_0 → int8 values and an f16 scale per 32, the same values', () => {
    // A hand-made block: d = 0.5, q_j = j − 16.
    const block = Uint8Array.of(0x00, 0x38, ...Array.from({ length: 32 }, (_, j) => (j - 16) & 0xff));
    const { groupSize, values, scales } = repackQ8_0(block);
    expect(groupSize).toBe(32);
    expect(Array.from(scales)).toEqual([0x3800]);
    expect(Array.from(values)).toEqual(Array.from({ length: 32 }, (_, j) => j - 16));
    const bytes = randomBlocks('Q8_0', 1);
    const r = repackQ8_0(bytes);
    const want = dequantize('Q8_0', bytes);
    for (const [i, v] of want.entries())
      expect(Math.fround(r.values[i]! * f16BitsToF32(r.scales[i >> 5]!))).toBe(v);
  });

  it('Q4_0 → sequential nibbles (2k low, 2k+1 high) and an f16 scale per 32, the same values', () => {
    // Byte j = j | (15 − j) << 4: ggml's elements 0..15 are 0..15, elements 16..31 are 15..0.
    const block = Uint8Array.of(0x00, 0x34, ...Array.from({ length: 16 }, (_, j) => j | ((15 - j) << 4)));
    const { nibbles, scales } = repackQ4_0(block);
    expect(Array.from(scales)).toEqual([0x3400]);
    // Elements in order: 0, 1, …, 15, 15, 14, …, 0, two to a byte.
    expect(Array.from(nibbles)).toEqual([
      0x10, 0x32, 0x54, 0x76, 0x98, 0xba, 0xdc, 0xfe, 0xef, 0xcd, 0xab, 0x89, 0x67, 0x45, 0x23, 0x01,
    ]);
    const bytes = randomBlocks('Q4_0', 2);
    const r = repackQ4_0(bytes);
    const want = dequantize('Q4_0', bytes);
    for (const [i, v] of want.entries())
      expect(Math.fround((nibble(r.nibbles, i) - 8) * f16BitsToF32(r.scales[i >> 5]!))).toBe(v);
  });

  it('Q4_K → sequential nibbles with an f32 scale and offset per 32, bit for bit', () => {
    const bytes = randomBlocks('Q4_K', 3);
    const r = repackQ4_K(bytes);
    expect(r.groupSize).toBe(32);
    const want = dequantize('Q4_K', bytes);
    for (const [i, v] of want.entries())
      expect(Math.fround(Math.fround(r.scales[i >> 5]! * nibble(r.nibbles, i)) - r.offsets[i >> 5]!)).toBe(v);
  });

  it('Q4_K → the same nibbles, and each block’s f16 d, dmin and twelve scale bytes as stored', () => {
    const bytes = randomBlocks('Q4_K', 5);
    const r = repackQ4_KSuperBlocks(bytes);
    expect(Array.from(r.nibbles)).toEqual(Array.from(repackQ4_K(bytes).nibbles));
    for (let b = 0; b < 3; b++) {
      const at = 144 * b;
      expect(r.d[b]).toBe(bytes[at]! | (bytes[at + 1]! << 8));
      expect(r.dmin[b]).toBe(bytes[at + 2]! | (bytes[at + 3]! << 8));
      expect(Array.from(new Uint8Array(r.subScales.buffer, 12 * b, 12))).toEqual(
        Array.from(bytes.subarray(at + 4, at + 16)),
      );
    }
  });

  it('Q6_K → int8 values (q − 32) with an f32 scale per 16, bit for bit', () => {
    const bytes = randomBlocks('Q6_K', 4);
    const r = repackQ6_K(bytes);
    expect(r.groupSize).toBe(16);
    expect(Math.min(...r.values)).toBeGreaterThanOrEqual(-32);
    expect(Math.max(...r.values)).toBeLessThanOrEqual(31);
    const want = dequantize('Q6_K', bytes);
    for (const [i, v] of want.entries()) expect(Math.fround(r.scales[i >> 4]! * r.values[i]!)).toBe(v);
  });

  it('Q6_K → 48 words of its codes per block (nibbles, then high pairs), and its f16 d and int8 scales as stored', () => {
    const bytes = randomBlocks('Q6_K', 9);
    const r = repackQ6_KSuperBlocks(bytes);
    const blocks = bytes.length / 210;
    expect(r.words.length).toBe(48 * blocks);
    const codes = new Uint8Array(256);
    for (let b = 0; b < blocks; b++) {
      const at = 210 * b;
      q6kValues(bytes.subarray(at, at + 210), codes);
      expect(Array.from({ length: 256 }, (_, i) => q6kCode(r.words, 48 * b, i))).toEqual(Array.from(codes));
      expect(r.d[b]).toBe(bytes[at + 208]! | (bytes[at + 209]! << 8));
      expect(Array.from(new Uint8Array(r.subScales.buffer, 16 * b, 16))).toEqual(
        Array.from(bytes.subarray(at + 192, at + 208)),
      );
    }
  });

  it('Q5_K → 40 words of its codes per block (nibbles, then a word of high bits per 32), and its f16 d, dmin and 6-bit scales as stored', () => {
    const bytes = randomBlocks('Q5_K', 19);
    const r = repackQ5_KSuperBlocks(bytes);
    const blocks = bytes.length / 176;
    expect(r.words.length).toBe(40 * blocks);
    const codes = new Uint8Array(256);
    for (let b = 0; b < blocks; b++) {
      const at = 176 * b;
      q5kValues(bytes.subarray(at, at + 176), codes);
      expect(codes.some((q) => q > 15)).toBe(true);
      expect(Array.from({ length: 256 }, (_, i) => q5kCode(r.words, 40 * b, i))).toEqual(Array.from(codes));
      expect(r.d[b]).toBe(bytes[at]! | (bytes[at + 1]! << 8));
      expect(r.dmin[b]).toBe(bytes[at + 2]! | (bytes[at + 3]! << 8));
      expect(Array.from(new Uint8Array(r.subScales.buffer, 12 * b, 12))).toEqual(
        Array.from(bytes.subarray(at + 4, at + 16)),
      );
    }
  });

  it('read blocks at any byte offset of their buffer (the repacks read words, not aligned views)', () => {
    for (const [seed, [type, repack]] of (
      [
        ['Q8_0', repackQ8_0],
        ['Q4_0', repackQ4_0],
        ['Q4_K', repackQ4_K],
        ['Q4_K', repackQ4_KSuperBlocks],
        ['Q6_K', repackQ6_K],
        ['Q6_K', repackQ6_KSuperBlocks],
        ['Q5_K', repackQ5_KSuperBlocks],
      ] as const
    ).entries()) {
      const bytes = randomBlocks(type, 10 + seed);
      const shifted = new Uint8Array(bytes.length + 3).fill(0xa5);
      shifted.set(bytes, 1);
      const fresh = repack(bytes) as unknown as Record<string, ArrayLike<number>>;
      const viewed = repack(shifted.subarray(1, 1 + bytes.length)) as unknown as Record<
        string,
        ArrayLike<number>
      >;
      for (const part of ['values', 'nibbles', 'words', 'scales', 'offsets', 'd', 'dmin', 'subScales']) {
        if (fresh[part])
          expect(Array.from(viewed[part]!), `${type} ${part}`).toEqual(Array.from(fresh[part]));
      }
    }
  });

  it('take whole blocks only', () => {
    expect(() => repackQ8_0(new Uint8Array(35))).toThrow(/multiple of 34 bytes/);
    expect(() => repackQ6_K(new Uint8Array(211))).toThrow(/multiple of 210 bytes/);
  });

  it('the default repack refuses, naming the tensor and its type', () => {
    const tensor = {
      name: 'blk.0.attn_q.weight',
      weight: 'model.layers.0.self_attn.q_proj.weight',
      type: 'Q4_K' as const,
      dims: [256, 4],
      shape: [4, 256],
      bytes: new Uint8Array(4 * 144),
    };
    expect(() => refuseQuantized(createCpuBackend(), tensor)).toThrow(DTypeError);
    expect(() => refuseQuantized(createCpuBackend(), tensor)).toThrow(
      /quantized GGUF tensors need the quantized kernels: 'blk\.0\.attn_q\.weight' is Q4_K/,
    );
  });
});

describe('GGUF blocks on core’s quantized formats', () => {
  const FORMATS = {
    Q4_0: 'q4g32',
    Q8_0: 'q8g32',
    Q4_K: 'q4k',
    Q6_K: 'q6k',
    Q4_1: 'q4g32a',
    Q5_0: 'q5g32',
    Q5_1: 'q5g32a',
    Q5_K: 'q5k',
  } as const;
  // Device bits per weight (codes, scales, offsets and q4k's, q5k's and q6k's sub-block scales) of a 512-wide row,
  // against the file's: no type larger on the device than in the file.
  const BITS = {
    Q4_0: [4.5, 4.5],
    Q8_0: [8.5, 8.5],
    Q4_K: [4.5, 4.5],
    Q6_K: [6.5625, 6.5625],
    Q4_1: [5, 5],
    Q5_0: [5.5, 5.5],
    Q5_1: [6, 6],
    Q5_K: [5.5, 5.5],
  } as const;
  for (const [type, format] of Object.entries(FORMATS) as [keyof typeof FORMATS, QuantFormat][]) {
    it(`${type} is ${format} exactly: ggml's values bit for bit, and quantizedMatmul gives the product with them`, async () => {
      const rows = 5;
      const cols = 512;
      const rng = new Rng(7);
      const bytes = quantize(
        type,
        Float32Array.from({ length: rows * cols }, (_, i) => rng.uniform(-2, 2) * (1 + (i % 7))),
      );
      const host = ggufAsCoreFormat(type, bytes, rows, cols);
      expect(host.format).toBe(format);
      const { blockSize, blockBytes } = GGML_TYPES[type];
      const deviceBits =
        (host.packed.byteLength +
          host.scales.length * (host.scaleDType === 'f32' ? 4 : 2) * (host.offsets ? 2 : 1) +
          (host.zeros?.byteLength ?? 0)) *
        (8 / (rows * cols));
      expect([deviceBits, (8 * blockBytes) / blockSize]).toEqual(BITS[type]);
      // dequantized by core's reference = ggml's values, bit for bit
      expect(Array.from(dequantizeWeights(host), Math.fround)).toEqual(Array.from(dequantize(type, bytes)));
      const cpu = createCpuBackend();
      try {
        const repacked = (await repackOntoCoreFormats(cpu, {
          name: 'blk.0.attn_q.weight',
          weight: 'model.layers.0.self_attn.q_proj.weight',
          type,
          dims: [cols, rows],
          shape: [rows, cols],
          bytes,
        })) as RepackedWeight;
        expect(repacked.format).toBe(format);
        // What the device holds: the host parts' bits per weight, no more.
        const held = Object.values(repacked.tensors).reduce((sum, t) => sum + t.byteLength, 0);
        expect((8 * held) / (rows * cols)).toBe(BITS[type][0]);
        const layout = quantLayout(format, cols);
        expect(Object.keys(repacked.tensors).sort()).toEqual(
          [
            ...(layout.offsets ? ['offsets'] : []),
            'packed',
            'scales',
            ...(layout.subBlockScales ? ['zeros'] : []),
          ].sort(),
        );
        const x = cpu.upload(
          Float32Array.from({ length: 2 * cols }, () => rng.uniform(-1, 1)),
          [2, cols],
        );
        const { packed, scales, zeros, offsets } = repacked.tensors as Record<string, never>;
        const [y] = cpu.run(quantizedMatmul, [x, packed, scales, zeros, undefined, offsets], {
          format: format as 'q4g32',
        });
        const w = cpu.upload(dequantize(type, bytes), [rows, cols]);
        const [want] = cpu.run(matmul, [x, w], { transB: true });
        const got = Array.from(await y!.read());
        const expected = Array.from(await want!.read());
        for (const [i, v] of expected.entries()) expect(got[i]).toBeCloseTo(v, 3);
      } finally {
        cpu.dispose();
      }
    });
  }

  it('Q5_0 and Q5_1 rows of any number of blocks: nibbles, then high words padded to 16 bytes, ggml’s values bit for bit', () => {
    const rng = new Rng(11);
    for (const [type, format, cols] of [
      ['Q5_0', 'q5g32', 96],
      ['Q5_1', 'q5g32a', 160],
      ['Q5_0', 'q5g32', 896],
    ] as const) {
      const rows = 3;
      const bytes = quantize(
        type,
        Float32Array.from({ length: rows * cols }, () => rng.uniform(-2, 2)),
      );
      const host = ggufAsCoreFormat(type, bytes, rows, cols);
      expect(host.format).toBe(format);
      const layout = quantLayout(format, cols);
      expect(host.packed.length).toBe(rows * layout.rowWords);
      expect(Array.from(dequantizeWeights(host), Math.fround)).toEqual(Array.from(dequantize(type, bytes)));
      // The padding words after each row's high words are zero.
      for (let r = 0; r < rows; r++)
        for (let w = 5 * layout.groups; w < layout.rowWords; w++)
          expect(host.packed[r * layout.rowWords + w]).toBe(0);
    }
  });

  it('Q5_0 and Q5_1 are also q8g32 and q8g32a exactly, in 8.5 and 9 bits per weight (int8 codes)', () => {
    const rng = new Rng(12);
    for (const [type, older, format] of [
      ['Q5_0', q5_0AsQ8g32, 'q8g32'],
      ['Q5_1', q5_1AsQ8g32a, 'q8g32a'],
    ] as const) {
      const bytes = quantize(
        type,
        Float32Array.from({ length: 2 * 64 }, () => rng.uniform(-1, 1)),
      );
      const host = older(bytes, 2, 64);
      expect(host.format).toBe(format);
      expect(Array.from(dequantizeWeights(host), Math.fround)).toEqual(Array.from(dequantize(type, bytes)));
    }
  });

  it('Q6_K is also q8g16 exactly, in 10 bits per weight (int8 q − 32 and an f32 d·scale per 16)', () => {
    const bytes = randomBlocks('Q6_K', 6);
    const host = q6_KAsQ8g16(bytes, 3, 256);
    expect(host.format).toBe('q8g16');
    expect(host.zeros).toBeUndefined();
    expect(Array.from(dequantizeWeights(host), Math.fround)).toEqual(Array.from(dequantize('Q6_K', bytes)));
    expect(() => q6_KAsQ8g16(bytes, 3, 128)).toThrow(/Q6_K blocks do not make whole rows/);
  });

  it('Q4_K is also q4g32a exactly, in 6 bits per weight (f32 d·sc and dmin·m per 32)', () => {
    const bytes = randomBlocks('Q4_K', 6);
    const host = q4_KAsQ4g32a(bytes, 3, 256);
    expect(host.format).toBe('q4g32a');
    expect(host.zeros).toBeUndefined();
    expect(Array.from(dequantizeWeights(host), Math.fround)).toEqual(Array.from(dequantize('Q4_K', bytes)));
    expect(() => q4_KAsQ4g32a(bytes, 3, 128)).toThrow(/Q4_K blocks do not make whole rows/);
  });

  it('Q5_K is also q8g32a exactly, in 10 bits per weight (int8 codes, f32 d·sc and dmin·m per 32)', () => {
    const bytes = randomBlocks('Q5_K', 6);
    const host = q5_KAsQ8g32a(bytes, 3, 256);
    expect(host.format).toBe('q8g32a');
    expect(host.zeros).toBeUndefined();
    expect(Array.from(dequantizeWeights(host), Math.fround)).toEqual(Array.from(dequantize('Q5_K', bytes)));
    expect(() => q5_KAsQ8g32a(bytes, 3, 128)).toThrow(/Q5_K blocks do not make whole rows/);
  });

  it('refuses blocks that do not make whole rows, and types core has no format for', () => {
    expect(() => q4_0AsQ4g32(new Uint8Array(18), 1, 64)).toThrow(/Q4_0 blocks do not make whole rows/);
    expect(() => ggufAsCoreFormat('Q6_K', new Uint8Array(210), 2, 256)).toThrow(
      /Q6_K blocks do not make whole rows/,
    );
    expect(() => ggufAsCoreFormat('Q4_K', new Uint8Array(144), 1, 128)).toThrow(ShapeError);
    // A block short, a row that is not whole blocks, for the 5-bit types and the ones with a min.
    expect(() => ggufAsCoreFormat('Q5_K', new Uint8Array(175), 1, 256)).toThrow(
      /Q5_K blocks do not make whole rows/,
    );
    expect(() => ggufAsCoreFormat('Q5_K', new Uint8Array(176), 1, 224)).toThrow(ShapeError);
    expect(() => ggufAsCoreFormat('Q5_0', new Uint8Array(22 * 3), 2, 32)).toThrow(/Q5_0 blocks/);
    expect(() => ggufAsCoreFormat('Q5_1', new Uint8Array(24), 1, 48)).toThrow(/Q5_1 blocks/);
    expect(() => ggufAsCoreFormat('Q4_1', new Uint8Array(19), 1, 32)).toThrow(/Q4_1 blocks/);
    const cpu = createCpuBackend();
    try {
      expect(() =>
        repackOntoCoreFormats(cpu, {
          name: 'blk.0.ffn_down.weight',
          weight: 'model.layers.0.mlp.down_proj.weight',
          type: 'Q3_K',
          dims: [256, 1],
          shape: [1, 256],
          bytes: new Uint8Array(110),
        }),
      ).toThrow(DTypeError);
    } finally {
      cpu.dispose();
    }
  });
});
