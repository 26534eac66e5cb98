import { describe, expect, it } from 'vitest';
import { Rng } from '../random.js';
import { dequantize, q4kScaleMin } from './dequantize.js';
import { GGML_QUANTIZED_TYPES, GGML_TYPES, type GgmlQuantizedType } from './ggmlTypes.js';
import { quantize } from './quantize.js';

// f16 words of the block scales used below.
const F16_HALF = [0x00, 0x38]; // 0.5
const F16_QUARTER = [0x00, 0x34]; // 0.25
const F16_EIGHTH = [0x00, 0x30]; // 0.125

describe('ggml block dequantization, against blocks computed by hand', () => {
  it('Q8_0: f16 d, then 32 int8 values; x = d·q', () => {
    // q_j = j − 16 (bytes are two's complement), d = 0.5.
    const block = Uint8Array.of(...F16_HALF, ...Array.from({ length: 32 }, (_, j) => (j - 16) & 0xff));
    expect(Array.from(dequantize('Q8_0', block))).toEqual(
      Array.from({ length: 32 }, (_, j) => 0.5 * (j - 16)),
    );
    // The extremes of int8.
    const ends = Uint8Array.of(...F16_QUARTER, 0x80, 0x7f, ...new Array(30).fill(0));
    expect(Array.from(dequantize('Q8_0', ends)).slice(0, 3)).toEqual([-32, 31.75, 0]);
  });

  it('Q4_0: element j in the low nibble of byte j, element j+16 in its high nibble; x = d·(q − 8)', () => {
    // Byte j = j | (15 − j) << 4: elements 0..15 hold 0..15, elements 16..31 hold 15..0.
    const block = Uint8Array.of(...F16_QUARTER, ...Array.from({ length: 16 }, (_, j) => j | ((15 - j) << 4)));
    const expected = [
      ...Array.from({ length: 16 }, (_, j) => 0.25 * (j - 8)), // -2, -1.75, ..., 1.75
      ...Array.from({ length: 16 }, (_, j) => 0.25 * (7 - j)), // 1.75, ..., -2
    ];
    expect(Array.from(dequantize('Q4_0', block))).toEqual(expected);
    expect(expected[0]).toBe(-2);
    expect(expected[16]).toBe(1.75);
  });

  // Q4_K scales and mins of the 8 sub-blocks, chosen so that sub-blocks 4–7 use their high bits.
  const SC = [1, 2, 3, 63, 17, 33, 48, 5];
  const M = [0, 1, 62, 7, 20, 40, 63, 9];
  // Packed by hand: bytes 0–3 hold sc0–3 in their low 6 bits and the top 2 bits of sc4–7 above;
  // bytes 4–7 the same for the mins; bytes 8–11 the low nibbles of sc4–7 (low) and m4–7 (high).
  //   sc4 = 17 = 01|0001, sc5 = 33 = 10|0001, sc6 = 48 = 11|0000, sc7 = 5 = 00|0101
  //   m4 = 20 = 01|0100, m5 = 40 = 10|1000, m6 = 63 = 11|1111, m7 = 9 = 00|1001
  const SCALE_BYTES = [
    1 | (1 << 6),
    2 | (2 << 6),
    3 | (3 << 6),
    63 | (0 << 6), // 65, 130, 195, 63
    0 | (1 << 6),
    1 | (2 << 6),
    62 | (3 << 6),
    7 | (0 << 6), // 64, 129, 254, 7
    1 | (4 << 4),
    1 | (8 << 4),
    0 | (15 << 4),
    5 | (9 << 4), // 65, 129, 240, 149
  ];

  it('Q4_K: the 6-bit scales and mins unpack from their 12 bytes', () => {
    expect(SCALE_BYTES).toEqual([65, 130, 195, 63, 64, 129, 254, 7, 65, 129, 240, 149]);
    const bytes = Uint8Array.from(SCALE_BYTES);
    for (let j = 0; j < 8; j++) expect(q4kScaleMin(bytes, j)).toEqual({ scale: SC[j], min: M[j] });
  });

  it('Q4_K: 32 bytes per 64 elements, low nibbles the even sub-block, high the odd; x = d·sc·q − dmin·m', () => {
    // Byte l of each 32 holds q = l mod 16 (low) and 15 − l mod 16 (high).
    const qs = Array.from({ length: 128 }, (_, i) => (i % 16) | ((15 - (i % 16)) << 4));
    const block = Uint8Array.of(...F16_HALF, ...F16_EIGHTH, ...SCALE_BYTES, ...qs);
    expect(block.length).toBe(GGML_TYPES.Q4_K.blockBytes);
    const values = dequantize('Q4_K', block);
    for (let e = 0; e < 256; e++) {
      const sub = Math.floor(e / 32); // sub-block 2·(e/64) for the low nibbles, +1 for the high
      const l = e % 32;
      const q = sub % 2 === 0 ? l % 16 : 15 - (l % 16);
      expect(values[e]).toBe(0.5 * SC[sub]! * q - 0.125 * M[sub]!);
    }
    // Spot checks: element 0 (sub-block 0, q 0) = 0; element 63 (sub-block 1, q 0) = −0.125;
    // element 208 (sub-block 6, l 16, q 0) = −0.125·63; element 127 (sub-block 3, q 0) = −0.125·7;
    // element 223 (sub-block 6, q 15) = 0.5·48·15 − 0.125·63.
    expect([values[0], values[63], values[208], values[127], values[15], values[223]]).toEqual([
      0, -0.125, -7.875, -0.875, 7.5, 352.125,
    ]);
  });

  it('Q6_K: ql, qh, int8 scales per 16, f16 d; x = d·scale·(q − 32)', () => {
    // Every ql byte 0x21 (low nibble 1, high 2); every qh byte 0b11_10_01_00 gives the four quarters
    // of each 128 elements the high bits 0, 1, 2, 3: q = 1, 1+16, 2+32, 2+48 = 1, 17, 34, 50.
    const scales = [1, -1, 2, -2, 3, 127, -128, 0, 5, 6, 7, 8, 9, 10, 11, -12];
    const block = Uint8Array.of(
      ...new Array(128).fill(0x21),
      ...new Array(64).fill(0b11100100),
      ...scales.map((s) => s & 0xff),
      ...F16_QUARTER,
    );
    expect(block.length).toBe(GGML_TYPES.Q6_K.blockBytes);
    const values = dequantize('Q6_K', block);
    const centred = [1 - 32, 17 - 32, 34 - 32, 50 - 32]; // -31, -15, 2, 18
    for (let e = 0; e < 256; e++) {
      const quarter = Math.floor((e % 128) / 32);
      expect(values[e]).toBe(0.25 * scales[Math.floor(e / 16)]! * centred[quarter]!);
    }
    // Element 0: 0.25·1·(−31); element 80 (scale 5 = 127, quarter 2): 0.25·127·2; element 96 (scale −128, quarter 3).
    expect([values[0], values[80], values[96]]).toEqual([-7.75, 63.5, -576]);
  });

  it('Q4_1: f16 d, f16 m, then Q4_0’s nibbles; x = d·q + m', () => {
    const qs = Array.from({ length: 16 }, (_, j) => j | ((15 - j) << 4));
    const block = Uint8Array.of(...F16_QUARTER, ...F16_HALF, ...qs);
    expect(block.length).toBe(GGML_TYPES.Q4_1.blockBytes);
    expect(Array.from(dequantize('Q4_1', block))).toEqual([
      ...Array.from({ length: 16 }, (_, j) => 0.25 * j + 0.5),
      ...Array.from({ length: 16 }, (_, j) => 0.25 * (15 - j) + 0.5),
    ]);
  });

  // Fifth bits: elements 0, 3, 16 and 31 set (bits 0, 3, 16, 31 of the little-endian u32).
  const QH = [0b1001, 0, 0b1, 0b1000_0000];
  const HIGH = new Set([0, 3, 16, 31]);
  // Low nibbles as Q4_0's: element j < 16 holds j, element 16 + j holds 15 − j.
  const LOW = Array.from({ length: 16 }, (_, j) => j | ((15 - j) << 4));
  const q5 = (e: number) => (e < 16 ? e : 31 - e) + (HIGH.has(e) ? 16 : 0);

  it('Q5_0: f16 d, a u32 of fifth bits (bit j for element j), Q4_0’s nibbles; x = d·(q − 16)', () => {
    const block = Uint8Array.of(...F16_HALF, ...QH, ...LOW);
    expect(block.length).toBe(GGML_TYPES.Q5_0.blockBytes);
    const values = dequantize('Q5_0', block);
    for (let e = 0; e < 32; e++) expect(values[e]).toBe(0.5 * (q5(e) - 16));
    // Element 0: q 16 → 0; element 1: q 1 → −7.5; element 16: 15 + 16 = 31 → 7.5; element 31: 0 + 16 → 0.
    expect([values[0], values[1], values[16], values[31]]).toEqual([0, -7.5, 7.5, 0]);
  });

  it('Q5_1: f16 d, f16 m, then Q5_0’s fifth bits and nibbles; x = d·q + m', () => {
    const block = Uint8Array.of(...F16_QUARTER, 0x00, 0xbc, ...QH, ...LOW); // m = −1
    expect(block.length).toBe(GGML_TYPES.Q5_1.blockBytes);
    const values = dequantize('Q5_1', block);
    for (let e = 0; e < 32; e++) expect(values[e]).toBe(0.25 * q5(e) - 1);
  });

  it('Q5_K: Q4_K’s scales and nibbles, bit s of qh[l] the fifth bit of element 32·s + l', () => {
    const qs = Array.from({ length: 128 }, (_, i) => (i % 16) | ((15 - (i % 16)) << 4));
    // qh[l] = l: element 32·s + l has its fifth bit where bit s of l is set.
    const qh = Array.from({ length: 32 }, (_, l) => l);
    const block = Uint8Array.of(...F16_HALF, ...F16_EIGHTH, ...SCALE_BYTES, ...qh, ...qs);
    expect(block.length).toBe(GGML_TYPES.Q5_K.blockBytes);
    const values = dequantize('Q5_K', block);
    for (let e = 0; e < 256; e++) {
      const sub = Math.floor(e / 32);
      const l = e % 32;
      const low = sub % 2 === 0 ? l % 16 : 15 - (l % 16);
      const q = low + (((l >> sub) & 1) << 4);
      expect(values[e]).toBe(Math.fround(Math.fround(0.5 * SC[sub]!) * q - 0.125 * M[sub]!));
    }
    // Element 33 (sub-block 1, l 1: low 14, bit 1 of 1 clear) and 35 (l 3: bit 1 set, q 12 + 16).
    expect([values[33], values[35]]).toEqual([0.5 * 2 * 14 - 0.125, 0.5 * 2 * 28 - 0.125]);
  });

  it('takes whole blocks only', () => {
    expect(() => dequantize('Q4_K', new Uint8Array(143))).toThrow(/multiple of 144 bytes/);
  });
});

describe('ggml block quantizers', () => {
  // The largest error of a round trip, as a fraction of the block's absolute maximum.
  const BOUND: Record<GgmlQuantizedType, number> = {
    Q8_0: 0.5 / 127 + 1e-3,
    Q4_0: 1 / 8,
    Q4_1: 1 / 15 + 1e-3,
    Q5_0: 1 / 16,
    Q5_1: 1 / 31 + 1e-3,
    Q4_K: 0.1,
    Q5_K: 0.05,
    Q6_K: 0.04,
  };

  for (const type of GGML_QUANTIZED_TYPES) {
    it(`${type}: quantized blocks decode to within the format's step`, () => {
      const rng = new Rng(3);
      const { blockSize } = GGML_TYPES[type];
      const values = Float32Array.from({ length: 4 * 256 }, (_, i) =>
        // One block of zeros, one of a single sign, the rest mixed and of different scales.
        i < blockSize ? 0 : i < 2 * blockSize ? rng.uniform(0.5, 3) : rng.uniform(-1, 1) * (1 + (i % 7)),
      );
      const decoded = dequantize(type, quantize(type, values));
      for (let b = 0; b < values.length / blockSize; b++) {
        const block = values.subarray(b * blockSize, (b + 1) * blockSize);
        const amax = Math.max(...block.map(Math.abs));
        for (let i = 0; i < blockSize; i++)
          expect(Math.abs(decoded[b * blockSize + i]! - block[i]!)).toBeLessThanOrEqual(
            BOUND[type] * amax + 1e-6,
          );
      }
    });
  }

  it('Q4_0 and Q8_0 write the values ggml would: d from the extreme, the nibble order', () => {
    const x = Float32Array.from({ length: 32 }, (_, j) => (j === 20 ? -4 : (j % 8) * 0.5 - 2));
    const q4 = quantize('Q4_0', x);
    // d = max / −8 = 0.5 (the extreme is −4): f16 0x3800.
    expect([q4[0], q4[1]]).toEqual(F16_HALF);
    // Element 20 (−4 → q 0) is the high nibble of byte 4; element 4 (0 → q 8) its low nibble.
    expect(q4[2 + 4]).toBe(8 | (0 << 4));
    const q8 = quantize(
      'Q8_0',
      Float32Array.from({ length: 32 }, (_, j) => j - 16),
    );
    // d = 16 / 127; element 0 (−16) → −127.
    expect((q8[2]! << 24) >> 24).toBe(-127);
  });

  it('Q5_0 and Q5_1 write the values ggml would: d from the extreme (or the range), the fifth bits', () => {
    const x = Float32Array.from({ length: 32 }, (_, j) => (j === 20 ? -8 : (j % 8) * 0.5 - 2));
    const q5 = quantize('Q5_0', x);
    // d = max / −16 = 0.5: f16 0x3800; element 20 (−8 → q 0), element 4 (0 → q 16: fifth bit 4 set).
    expect([q5[0], q5[1]]).toEqual(F16_HALF);
    expect(q5[6 + 4]).toBe(0 | (0 << 4));
    expect(q5[2]! & (1 << 4)).toBe(1 << 4);
    const q51 = quantize(
      'Q5_1',
      Float32Array.from({ length: 32 }, (_, j) => j * 0.25 - 1),
    );
    // d = (6.75 + 1) / 31 = 0.25, m = −1: element j has q = j exactly.
    expect(Array.from(dequantize('Q5_1', q51))).toEqual(Array.from({ length: 32 }, (_, j) => j * 0.25 - 1));
  });
});
