import { wgmmaAccumulatorElement, wgmmaDescriptor } from '@rayo/cuda-ptx';
import { describe, expect, it } from 'vitest';
import { useInterpretedDevice } from './interpretedDevice.js';
import { bitsF32, packHalves, random, randomBf16, reference } from './tensorCoreKernels.js';
import { wgmmaBf16Tile } from './wgmmaKernel.js';
import { decodeWgmmaDescriptor, descriptorElementAddress } from './wgmmaSemantics.js';

const device = useInterpretedDevice();

describe('wgmma in the PTX interpreter', () => {
  for (const n of [16, 64, 256]) {
    it(`m64n${n}k16 bf16: four k steps over 128B-swizzled tiles give A·Bᵀ, placed by wgmmaAccumulatorElement`, () => {
      const next = random(n);
      const aBits = Array.from({ length: 64 * 64 }, () => randomBf16(next));
      const bBits = Array.from({ length: n * 64 }, () => randomBf16(next));
      const [a, b, out] = [packHalves(aBits), packHalves(bBits), 64 * n].map((w) => device.buffer(w));
      device.launch(
        () => wgmmaBf16Tile(n),
        'wgmma_tile',
        { block: 128 },
        { a: a!.ptr, b: b!.ptr, d: out!.ptr },
      );
      const raw = device.read(out!, 64 * n);
      const value = (h: number) => bitsF32(h << 16);
      const bT = Array.from({ length: 64 * n }, (_, i) => value(bBits[(i % n) * 64 + Math.floor(i / n)]!));
      const ref = reference(64, n, 64, aBits.map(value), bT, new Array(64 * n).fill(0));
      for (let t = 0; t < 128; t++) {
        for (let i = 0; i < n / 2; i++) {
          const { row, col } = wgmmaAccumulatorElement(n, t, i);
          const got = bitsF32(raw[t * (n / 2) + i]!);
          expect(Math.abs(got - ref.d[row * n + col]!), `D[${row}][${col}]`).toBeLessThanOrEqual(
            2 ** -22 * ref.scale[row * n + col]!,
          );
        }
      }
    });
  }

  it('decodes descriptors as wgmmaDescriptor encodes them, and finds elements of each layout', () => {
    const bits = wgmmaDescriptor({
      address: 0x2400,
      leadingByteOffset: 256,
      strideByteOffset: 1024,
      swizzle: '64B',
      baseOffset: 5,
    });
    const d = decodeWgmmaDescriptor(Number(bits & 0xffffffffn), Number(bits >> 32n));
    expect(d).toEqual({
      start: 0x2400,
      leadingByteOffset: 256,
      strideByteOffset: 1024,
      baseOffset: 5,
      swizzle: '64B',
    });
    // 64B: rows of 64 bytes, chunk XORed by (line & 3); row 3 is in line 1.
    expect(descriptorElementAddress(d, 3, 9)).toBe(0x2400 + 3 * 64 + ((1 ^ 1) * 16 + 2));
    const plain = { ...d, swizzle: 'none' as const };
    // Unswizzled: core matrices of 8 rows × 16 bytes, K's second half LBO on, row groups SBO apart.
    expect(descriptorElementAddress(plain, 10, 12)).toBe(0x2400 + 1024 + 256 + 2 * 16 + 4 * 2);
  });

  it('finds elements of MN-major (transposed) tiles as the canonical layouts say', () => {
    const d = { start: 0x4000, leadingByteOffset: 8192, strideByteOffset: 1024, baseOffset: 0 };
    // 128B: a row per k holds 64 of MN; MN 70 is in the second 64-block (LBO on), k 9 in the second 8-k atom (SBO on).
    const at = 0x4000 + 8192 + 1024 + 1 * 128 + 6 * 2;
    expect(descriptorElementAddress({ ...d, swizzle: '128B' }, 70, 9, true)).toBe(
      at ^ (((at >>> 7) & 7) << 4),
    );
    // Unswizzled: core matrices of 8 MN × 8 k, SBO apart along MN and LBO apart along K, a 16-byte row per k.
    const plain = { ...d, leadingByteOffset: 256, strideByteOffset: 128, swizzle: 'none' as const };
    expect(descriptorElementAddress(plain, 10, 12, true)).toBe(0x4000 + 128 + 256 + 4 * 16 + 2 * 2);
  });
});
