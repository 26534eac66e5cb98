import { describe, expect, it } from 'vitest';
import { createCpuBackend } from '../cpu/backend.js';
import { toHostArray, toNumbers } from '../dtype.js';
import { InvalidArgumentError, ShapeError } from '../errors.js';
import { quantizedMatmul } from '../kernels/quantized.js';
import { Rng } from '../testing/random.js';
import {
  codeAt,
  QUANT_FORMATS,
  q5g32Code,
  q5kCode,
  q6kCode,
  q6kSubBlockScale,
  quantLayout,
  subBlockScaleMin,
  zeroAt,
} from './layout.js';
import { putQ5kCode } from './q5k.js';
import { putQ6kCode } from './q6k.js';
import { dequantizeWeights, quantizationError, quantizeWeights } from './quantize.js';
import { runQuantizedMatmul, uploadQuantized } from './quantizedWeight.js';

/** The formats that take any K (q4k's and q6k's rows are whole super-blocks of 256). */
const ANY_K_FORMATS = QUANT_FORMATS.filter((format) => !quantLayout(format, 1).subBlockScales);

function gaussian(seed: number, count: number, scale = 0.02): Float32Array {
  const rng = new Rng(seed);
  return Float32Array.from({ length: count }, () => rng.normal() * scale);
}

describe('quantized layouts', () => {
  it('pads rows to 32-weight blocks and q4 rows to whole groups', () => {
    expect(quantLayout('q8', 1)).toMatchObject({ rowWords: 8, groups: 1, groupSize: 32, zeroWords: 0 });
    expect(quantLayout('q8', 4096)).toMatchObject({ rowWords: 1024, groups: 1 });
    expect(quantLayout('q4g32', 4096)).toMatchObject({ rowWords: 512, groups: 128, zeroWords: 16 });
    expect(quantLayout('q4g128', 4096)).toMatchObject({ rowWords: 512, groups: 32, zeroWords: 4 });
    expect(quantLayout('q4g128', 129)).toMatchObject({ rowWords: 32, groups: 2, zeroWords: 1 });
    expect(quantLayout('q4g32', 33)).toMatchObject({ rowWords: 8, groups: 2 });
    expect(quantLayout('q8g32', 33)).toMatchObject({ rowWords: 16, groups: 2, groupSize: 32, zeroWords: 0 });
    expect(quantLayout('q8g16', 17)).toMatchObject({ rowWords: 8, groups: 2, groupSize: 16 });
    expect(quantLayout('q8g16', 33)).toMatchObject({ rowWords: 16, groups: 3 });
    expect(quantLayout('q4g32a', 33)).toMatchObject({ rowWords: 8, groups: 2, zeroWords: 0, offsets: true });
    expect(quantLayout('q8g32a', 33)).toMatchObject({
      rowWords: 16,
      groups: 2,
      groupSize: 32,
      offsets: true,
    });
  });

  it('gives ggml’s f32 values: f32(q · scale), and f32(f32(q · scale) − offset) for q4g32a', () => {
    // Codes 3 and 5 (bytes / nibbles), a scale that makes q · scale inexact in f32.
    const scale = Math.fround(1 / 3);
    const q8 = {
      n: 1,
      k: 2,
      packed: Uint32Array.of(0x0503),
      scales: Float32Array.of(scale),
      scaleDType: 'f32',
    } as const;
    expect([...dequantizeWeights({ ...q8, format: 'q8g16' })]).toEqual([
      Math.fround(3 * scale),
      Math.fround(5 * scale),
    ]);
    const offset = Math.fround(0.7);
    const q4 = {
      ...q8,
      format: 'q4g32a',
      packed: Uint32Array.of(0x53),
      offsets: Float32Array.of(offset),
    } as const;
    expect([...dequantizeWeights(q4)]).toEqual([
      Math.fround(Math.fround(3 * scale) - offset),
      Math.fround(Math.fround(5 * scale) - offset),
    ]);
    expect(() => dequantizeWeights({ ...q4, offsets: undefined })).toThrow(/q4g32a needs offsets/);
    // q8g32a: signed bytes 3 and −3, each scaled and offset as q4g32a's nibbles are.
    const q8a = { ...q4, format: 'q8g32a', packed: Uint32Array.of(0xfd03) } as const;
    expect([...dequantizeWeights(q8a)]).toEqual([
      Math.fround(Math.fround(3 * scale) - offset),
      Math.fround(Math.fround(-3 * scale) - offset),
    ]);
  });

  it('reads q8 bytes as two’s complement and q4 nibbles lower first', () => {
    const q8 = quantLayout('q8', 4);
    const word = Uint32Array.of(0x80ff7f01);
    expect([0, 1, 2, 3].map((k) => codeAt(word, q8, 0, k))).toEqual([1, 127, -1, -128]);
    const q4 = quantLayout('q4g32', 8);
    const nibbles = Uint32Array.of(0xfedcba98);
    expect([0, 1, 7].map((k) => codeAt(nibbles, q4, 0, k))).toEqual([8, 9, 15]);
    expect(zeroAt(Uint32Array.of(0x00000a30), q4, 0, 1)).toBe(3);
    expect(zeroAt(Uint32Array.of(0x00000a30), q4, 0, 2)).toBe(10);
  });
});

describe('quantizeWeights', () => {
  it('rounds to nearest: every weight within half a step (a step with zero points, whose range may clip)', () => {
    const [n, k] = [7, 300];
    const w = gaussian(1, n * k);
    for (const format of ANY_K_FORMATS) {
      for (const zeroPoints of quantLayout(format, 1).zeroPoints ? [false, true] : [false]) {
        const q = quantizeWeights(w, [n, k], format, { zeroPoints });
        const layout = quantLayout(format, k);
        const back = dequantizeWeights(q);
        const scales = toNumbers(q.scaleDType, q.scales);
        for (let i = 0; i < n * k; i++) {
          const g = Math.floor((i % k) / layout.groupSize);
          const step = scales[Math.floor(i / k) * layout.groups + g]!;
          // f32 values add their own rounding (2^-24 relative) to half a step.
          const slack = layout.f32Values ? 2 ** -23 * Math.abs(w[i]!) + 1e-12 : 1e-12;
          expect(Math.abs(back[i]! - w[i]!)).toBeLessThanOrEqual((zeroPoints ? step : step / 2) + slack);
        }
        const error = quantizationError(w, q);
        // 8 bits: about 1/(127·2·sqrt(3)) of the largest weight per row; 4 bits about 1/(7·2·sqrt(3)) per group.
        expect(error.rmsRelative).toBeLessThan(layout.bits === 8 ? 0.01 : 0.15);
        expect(error.maxAbs).toBeLessThan(error.maxWeight / (layout.bits === 8 ? 200 : 10));
      }
    }
  });

  it('reports the error of q8, q4g128 and q4g32 on Gaussian weights, smallest with the most bits', () => {
    const [n, k] = [64, 512];
    const w = gaussian(2, n * k);
    const errors = Object.fromEntries(
      QUANT_FORMATS.map((format) => [format, quantizationError(w, quantizeWeights(w, [n, k], format))]),
    );
    expect(errors.q8!.rmsRelative).toBeLessThan(0.01);
    expect(errors.q4g32!.rmsRelative).toBeLessThan(errors.q4g128!.rmsRelative);
    expect(errors.q4g128!.rmsRelative).toBeLessThan(0.2);
    expect(errors.q8!.rmsRelative).toBeLessThan(errors.q4g32!.rmsRelative);
    // Smaller groups, smaller error; the asymmetric 4-bit range is no worse than the symmetric one.
    expect(errors.q8g16!.rmsRelative).toBeLessThan(errors.q8g32!.rmsRelative);
    expect(errors.q8g32!.rmsRelative).toBeLessThan(errors.q8!.rmsRelative);
    expect(errors.q4g32a!.rmsRelative).toBeLessThan(errors.q4g32!.rmsRelative);
    expect(errors.q8g32a!.rmsRelative).toBeLessThan(errors.q8g32!.rmsRelative);
    // q4k's 6-bit sub-block scales and mins cost a little against q4g32a's exact ones.
    expect(errors.q4k!.rmsRelative).toBeLessThan(0.15);
    expect(errors.q4k!.rmsRelative).toBeLessThan(1.25 * errors.q4g32a!.rmsRelative);
    // q6k's 6-bit codes: about a quarter of a 4-bit format's error, above int8's.
    expect(errors.q6k!.rmsRelative).toBeLessThan(errors.q4k!.rmsRelative / 3);
    expect(errors.q6k!.rmsRelative).toBeGreaterThan(errors.q8g16!.rmsRelative);
    // q5k's 5-bit codes: about half of q4k's error (twice the levels), above q6k's.
    expect(errors.q5k!.rmsRelative).toBeLessThan(0.6 * errors.q4k!.rmsRelative);
    expect(errors.q5k!.rmsRelative).toBeGreaterThan(errors.q6k!.rmsRelative);
    const zeroPoints = quantizationError(w, quantizeWeights(w, [n, k], 'q4g32', { zeroPoints: true }));
    expect(zeroPoints.rmsRelative).toBeLessThan(0.15);
  });

  it('takes bf16 weights as stored words and measures against them', () => {
    const [n, k] = [3, 64];
    const w = gaussian(3, n * k);
    const bf16 = toHostArray('bf16', w);
    const q = quantizeWeights(bf16, [n, k], 'q8', { dtype: 'bf16' });
    const error = quantizationError(bf16, q, 'bf16');
    expect(error.rmsRelative).toBeGreaterThan(0);
    expect(error.rmsRelative).toBeLessThan(0.01);
  });

  it('stores zero weights and padding as code 0 of q8 and 8 of q4', () => {
    const q8 = quantizeWeights(new Float32Array(5), [1, 5], 'q8');
    expect([...q8.packed]).toEqual(new Array(8).fill(0));
    const q4 = quantizeWeights(Float32Array.of(0.5, -0.25, 1), [1, 3], 'q4g32');
    expect(q4.packed[1]).toBe(0x88888888);
    expect([...dequantizeWeights(q4)].map((v) => Math.round(v * 1000) / 1000)).toEqual([0.571, -0.286, 1]);
  });

  it('refuses shapes, formats and options that do not fit', () => {
    expect(() => quantizeWeights(new Float32Array(6), [2, 4], 'q8')).toThrow(ShapeError);
    expect(() => quantizeWeights(new Float32Array(4), [1, 4], 'q5' as 'q8')).toThrow(InvalidArgumentError);
    expect(() => quantizeWeights(new Float32Array(4), [1, 4], 'q8', { zeroPoints: true })).toThrow(
      /no zero points/,
    );
    expect(() => quantizeWeights(new Float32Array(4), [1, 4], 'q4g32a', { zeroPoints: true })).toThrow(
      InvalidArgumentError,
    );
    expect(() =>
      quantizeWeights(new Float32Array(4), [1, 4], 'q8g16', { scaleDType: 'i32' as 'f32' }),
    ).toThrow(/scales are stored as floats/);
  });
});

describe('a quantized weight on a backend', () => {
  it('multiplies like the dequantized weight, and reports the bytes it holds', async () => {
    const backend = createCpuBackend();
    const [m, n, k] = [2, 9, 256];
    const w = gaussian(4, n * k, 0.1);
    const xs = gaussian(5, m * k, 1);
    for (const format of QUANT_FORMATS) {
      using weight = uploadQuantized(backend, quantizeWeights(w, [n, k], format));
      const layout = quantLayout(format, k);
      const scaleBytes = ['q8g32', 'q4g32', 'q4g128', 'q4k', 'q5k', 'q6k', 'q5g32', 'q5g32a'].includes(format)
        ? 2
        : 4;
      expect(weight.byteLength).toBe(
        n * layout.rowWords * 4 +
          n * layout.groups * scaleBytes * (layout.offsets ? 2 : 1) +
          n * layout.zeroWords * 4 * (layout.subBlockScales ? 1 : 0),
      );
      using x = backend.upload(xs, [m, k]);
      using y = runQuantizedMatmul(backend, x, weight);
      const got = await y.read();
      const deq = dequantizeWeights(quantizeWeights(w, [n, k], format));
      for (let i = 0; i < m; i++) {
        for (let j = 0; j < n; j++) {
          let sum = 0;
          for (let p = 0; p < k; p++) sum += xs[i * k + p]! * deq[j * k + p]!;
          expect(got[i * n + j]).toBeCloseTo(sum, 4);
        }
      }
    }
    backend.dispose();
  });
});

describe('q4k', () => {
  /** ggml's get_scale_min_k4 over a super-block's twelve bytes. */
  function ggmlScaleMin(q: Uint8Array, j: number): { sc: number; m: number } {
    if (j < 4) return { sc: q[j]! & 63, m: q[j + 4]! & 63 };
    return { sc: (q[j + 4]! & 0xf) | ((q[j - 4]! >> 6) << 4), m: (q[j + 4]! >> 4) | ((q[j]! >> 6) << 4) };
  }

  it('holds 4.5 bits per weight: nibbles, an f16 d and dmin and twelve bytes per 256', () => {
    const layout = quantLayout('q4k', 512);
    expect(layout).toMatchObject({
      rowWords: 64,
      groups: 2,
      groupSize: 256,
      zeroWords: 6,
      subBlockScales: true,
    });
    const q = quantizeWeights(gaussian(6, 3 * 512), [3, 512], 'q4k');
    expect(q.scaleDType).toBe('f16');
    const bytes = q.packed.byteLength + q.scales.byteLength + q.offsets!.byteLength + q.zeros!.byteLength;
    expect((8 * bytes) / (3 * 512)).toBe(4.5);
  });

  it("reads the 6-bit scales and mins as ggml's get_scale_min_k4 does", () => {
    const rng = new Rng(7);
    for (let trial = 0; trial < 20; trial++) {
      const words = Uint32Array.from({ length: 4 }, () => rng.int(0, 2 ** 32));
      const bytes = new Uint8Array(words.buffer);
      for (let j = 0; j < 8; j++) {
        // The super-block's words start at word 1: the reading takes its offset into account.
        expect(subBlockScaleMin(words, 1, j)).toEqual(ggmlScaleMin(bytes.subarray(4), j));
      }
    }
  });

  it("gives ggml's value f32(f32(q · f32(d · sc)) − f32(dmin · m))", () => {
    // Sub-block 0: sc 5, m 3; sub-block 5: sc 37 (low nibble 5, top bits 2), m 50 (low nibble 2, top bits 3).
    const bytes = new Uint8Array(12);
    bytes[0] = 5;
    bytes[4] = 3;
    bytes[1] = (bytes[1]! & 0x3f) | (2 << 6);
    bytes[5] = (bytes[5]! & 0x3f) | (3 << 6);
    bytes[9] = 5 | (2 << 4);
    const zeros = new Uint32Array(bytes.buffer);
    const packed = new Uint32Array(32);
    packed[0] = 0x7; // weight 0: code 7
    packed[20] = 0xc0; // weight 161 (sub-block 5): code 12
    const d = Math.fround(1 / 3);
    const dmin = Math.fround(1 / 7);
    const weight = {
      format: 'q4k',
      n: 1,
      k: 256,
      packed,
      scales: Float32Array.of(d),
      scaleDType: 'f32',
      zeros,
      offsets: Float32Array.of(dmin),
    } as const;
    const values = dequantizeWeights(weight);
    const value = (q: number, sc: number, m: number) =>
      Math.fround(Math.fround(q * Math.fround(d * sc)) - Math.fround(dmin * m));
    expect(subBlockScaleMin(zeros, 0, 5)).toEqual({ sc: 37, m: 50 });
    expect(values[0]).toBe(value(7, 5, 3));
    expect(values[1]).toBe(value(0, 5, 3));
    expect(values[161]).toBe(value(12, 37, 50));
    expect(values[160]).toBe(value(0, 37, 50));
    expect(() => dequantizeWeights({ ...weight, zeros: undefined })).toThrow(
      /q4k needs its sub-block scales/,
    );
  });

  it('quantizes within a step of each sub-block, and refuses K that is not whole super-blocks', () => {
    const [n, k] = [4, 768];
    const w = gaussian(8, n * k);
    const q = quantizeWeights(w, [n, k], 'q4k');
    const back = dequantizeWeights(q);
    const d = toNumbers('f16', q.scales);
    for (let i = 0; i < n * k; i++) {
      const row = Math.floor(i / k);
      const kk = i % k;
      const s = Math.floor(kk / 256);
      const { sc } = subBlockScaleMin(q.zeros!, row * 9 + 3 * s, (kk >> 5) & 7);
      // The 6-bit scale may round below the sub-block's range / 15 by half of d, the min by half of dmin.
      expect(Math.abs(back[i]! - w[i]!)).toBeLessThanOrEqual(Math.fround(d[row * 3 + s]! * sc) + 1e-3);
    }
    expect(() => quantizeWeights(new Float32Array(300), [1, 300], 'q4k')).toThrow(ShapeError);
    // The product refuses such a K too, naming x and what it expected.
    const backend = createCpuBackend();
    using weight = uploadQuantized(backend, quantizeWeights(gaussian(9, 512), [1, 512], 'q4k'));
    using x = backend.upload(new Float32Array(300), [1, 300]);
    const words = backend.upload(new Uint32Array(2 * 32), [1, 64], 'u32');
    const error = (() => {
      try {
        backend.run(quantizedMatmul, [x, words, weight.scales, weight.zeros, undefined, weight.offsets], {
          format: 'q4k',
        });
      } catch (e) {
        return e;
      }
    })();
    expect(error).toBeInstanceOf(ShapeError);
    expect(error).toMatchObject({
      argument: 'x',
      expected: 'K a multiple of 256 (whole q4k super-blocks)',
      actual: 'K = 300',
    });
    words.dispose();
    backend.dispose();
    expect(() => quantizeWeights(new Float32Array(300), [1, 300], 'q4k')).toThrow(/K a multiple of 256/);
  });
});

describe('q6k', () => {
  /** ggml's Q6_K codes of a block (ql[128], qh[64]) in element order (dequantize_row_q6_K). */
  function ggmlCodes(ql: Uint8Array, qh: Uint8Array): number[] {
    const q: number[] = [];
    for (let h = 0; h < 2; h++) {
      for (let l = 0; l < 32; l++) {
        const a = ql[64 * h + l]!;
        const b = ql[64 * h + l + 32]!;
        const c = qh[32 * h + l]!;
        q[128 * h + l] = (a & 0xf) | ((c & 3) << 4);
        q[128 * h + l + 32] = (b & 0xf) | (((c >> 2) & 3) << 4);
        q[128 * h + l + 64] = (a >> 4) | (((c >> 4) & 3) << 4);
        q[128 * h + l + 96] = (b >> 4) | (((c >> 6) & 3) << 4);
      }
    }
    return q;
  }

  it('holds 6.5625 bits per weight: 48 words, an f16 d and sixteen int8 scales per 256', () => {
    const layout = quantLayout('q6k', 512);
    expect(layout).toMatchObject({
      bits: 6,
      rowWords: 96,
      groups: 2,
      groupSize: 256,
      zeroWords: 8,
      offsets: false,
      subBlockScales: true,
    });
    const q = quantizeWeights(gaussian(16, 3 * 512), [3, 512], 'q6k');
    expect(q.scaleDType).toBe('f16');
    expect(q.offsets).toBeUndefined();
    const bytes = q.packed.byteLength + q.scales.byteLength + q.zeros!.byteLength;
    expect((8 * bytes) / (3 * 512)).toBe(6.5625);
  });

  it('reads back every code it writes, each high pair in the byte of its nibble', () => {
    const rng = new Rng(17);
    const codes = Array.from({ length: 256 }, () => rng.int(0, 64));
    const packed = new Uint32Array(50);
    for (let i = 0; i < 256; i++) putQ6kCode(packed, 2, i, codes[i]!);
    expect(Array.from({ length: 256 }, (_, i) => q6kCode(packed, 2, i))).toEqual(codes);
    expect(packed[0]).toBe(0);
    // Byte b of a high word masked as the kernels mask it gives the codes of byte b of its nibble words.
    const high = packed[2 + 32 + 3]!;
    const low = packed[2 + 7]!;
    const odd = ((low >>> 4) & 0x0f0f0f0f) | ((high >>> 2) & 0x30303030);
    expect([0, 1, 2, 3].map((b) => (odd >>> (8 * b)) & 0xff)).toEqual([57, 59, 61, 63].map((i) => codes[i]));
  });

  it("gives ggml's value f32(f32(d · sc) · (q − 32)) for ggml's own codes and int8 scales", () => {
    const rng = new Rng(18);
    const ql = Uint8Array.from({ length: 128 }, () => rng.int(0, 256));
    const qh = Uint8Array.from({ length: 64 }, () => rng.int(0, 256));
    const sc = Int8Array.from({ length: 16 }, () => rng.int(-128, 128));
    const codes = ggmlCodes(ql, qh);
    const packed = new Uint32Array(48);
    codes.forEach((q, i) => {
      putQ6kCode(packed, 0, i, q);
    });
    const zeros = new Uint32Array(new Uint8Array(sc.buffer).buffer);
    expect(Array.from({ length: 16 }, (_, j) => q6kSubBlockScale(zeros, 0, j))).toEqual([...sc]);
    const d = Math.fround(1 / 3000);
    const values = dequantizeWeights({
      format: 'q6k',
      n: 1,
      k: 256,
      packed,
      scales: Float32Array.of(d),
      scaleDType: 'f32',
      zeros,
    });
    for (let i = 0; i < 256; i++) {
      expect(values[i]).toBe(Math.fround(Math.fround(d * sc[i >> 4]!) * (codes[i]! - 32)));
    }
    expect(() =>
      dequantizeWeights({
        format: 'q6k',
        n: 1,
        k: 256,
        packed,
        scales: Float32Array.of(d),
        scaleDType: 'f32',
      }),
    ).toThrow(/q6k needs its sub-block scales/);
  });

  it('quantizes within half a step of each sub-block, and refuses K that is not whole super-blocks', () => {
    const [n, k] = [3, 768];
    const w = gaussian(19, n * k);
    const q = quantizeWeights(w, [n, k], 'q6k');
    const back = dequantizeWeights(q);
    const d = toNumbers('f16', q.scales);
    for (let i = 0; i < n * k; i++) {
      const row = Math.floor(i / k);
      const s = Math.floor((i % k) / 256);
      const sc = q6kSubBlockScale(q.zeros!, row * 12 + 4 * s, ((i % k) & 255) >> 4);
      expect(sc).toBeGreaterThan(0);
      // The int8 scale may round below amax / 31 by half of d: the step stays within a code or so.
      expect(Math.abs(back[i]! - w[i]!)).toBeLessThanOrEqual(Math.fround(d[row * 3 + s]! * sc) + 1e-4);
    }
    expect(() => quantizeWeights(new Float32Array(300), [1, 300], 'q6k')).toThrow(ShapeError);
  });
});

describe('q5k', () => {
  /** ggml's Q5_K codes of a block (qh[32], qs[128]) in element order (dequantize_row_q5_K): bit s of qh[l] is element 32s + l's fifth bit. */
  function ggmlCodes(qh: Uint8Array, qs: Uint8Array): number[] {
    const q: number[] = [];
    for (let pair = 0; pair < 4; pair++) {
      for (let l = 0; l < 32; l++) {
        const byte = qs[32 * pair + l]!;
        q[64 * pair + l] = (byte & 0xf) | (((qh[l]! >> (2 * pair)) & 1) << 4);
        q[64 * pair + 32 + l] = (byte >> 4) | (((qh[l]! >> (2 * pair + 1)) & 1) << 4);
      }
    }
    return q;
  }

  it('holds 5.5 bits per weight: 40 words, an f16 d and dmin and twelve bytes per 256', () => {
    const layout = quantLayout('q5k', 512);
    expect(layout).toMatchObject({
      bits: 5,
      rowWords: 80,
      groups: 2,
      groupSize: 256,
      zeroWords: 6,
      offsets: true,
      subBlockScales: true,
    });
    const q = quantizeWeights(gaussian(26, 3 * 512), [3, 512], 'q5k');
    expect(q.scaleDType).toBe('f16');
    const bytes = q.packed.byteLength + q.scales.byteLength + q.offsets!.byteLength + q.zeros!.byteLength;
    expect((8 * bytes) / (3 * 512)).toBe(5.5);
  });

  it('reads back every code it writes, a 16-byte word’s high bits in one word', () => {
    const rng = new Rng(27);
    const codes = Array.from({ length: 256 }, () => rng.int(0, 32));
    const packed = new Uint32Array(42);
    for (let i = 0; i < 256; i++) putQ5kCode(packed, 2, i, codes[i]!);
    expect(Array.from({ length: 256 }, (_, i) => q5kCode(packed, 2, i))).toEqual(codes);
    expect(packed[0]).toBe(0);
    // Nibble word 4j + w (w = 3 here) and high word 32 + j shifted by 2w, masked as the kernels mask them,
    // give the codes of their bytes: odd weights 2b + 1 of the nibble word.
    const high = packed[2 + 32 + 5]! >>> 6;
    const low = packed[2 + 4 * 5 + 3]!;
    const odd = ((low >>> 4) & 0x0f0f0f0f) | ((high << 3) & 0x10101010);
    const even = (low & 0x0f0f0f0f) | ((high << 4) & 0x10101010);
    const first = 32 * 5 + 8 * 3;
    expect([0, 1, 2, 3].map((b) => (odd >>> (8 * b)) & 0xff)).toEqual(
      [1, 3, 5, 7].map((i) => codes[first + i]),
    );
    expect([0, 1, 2, 3].map((b) => (even >>> (8 * b)) & 0xff)).toEqual(
      [0, 2, 4, 6].map((i) => codes[first + i]),
    );
  });

  it("gives ggml's value f32(f32(q · f32(d · sc)) − f32(dmin · m)) for ggml's own codes", () => {
    const rng = new Rng(28);
    const qh = Uint8Array.from({ length: 32 }, () => rng.int(0, 256));
    const qs = Uint8Array.from({ length: 128 }, () => rng.int(0, 256));
    const codes = ggmlCodes(qh, qs);
    expect(codes.some((q) => q > 15)).toBe(true);
    const packed = new Uint32Array(40);
    codes.forEach((q, i) => {
      putQ5kCode(packed, 0, i, q);
    });
    const zeros = Uint32Array.from({ length: 3 }, () => rng.int(0, 2 ** 32));
    const d = Math.fround(1 / 3000);
    const dmin = Math.fround(1 / 7000);
    const weight = {
      format: 'q5k',
      n: 1,
      k: 256,
      packed,
      scales: Float32Array.of(d),
      scaleDType: 'f32',
      zeros,
      offsets: Float32Array.of(dmin),
    } as const;
    const values = dequantizeWeights(weight);
    for (let i = 0; i < 256; i++) {
      const { sc, m } = subBlockScaleMin(zeros, 0, i >> 5);
      expect(values[i]).toBe(
        Math.fround(Math.fround(codes[i]! * Math.fround(d * sc)) - Math.fround(dmin * m)),
      );
    }
    expect(() => dequantizeWeights({ ...weight, zeros: undefined })).toThrow(
      /q5k needs its sub-block scales/,
    );
  });

  it('quantizes within a step of each sub-block, uses the high bit, and refuses K that is not whole super-blocks', () => {
    const [n, k] = [4, 768];
    const w = gaussian(29, n * k);
    const q = quantizeWeights(w, [n, k], 'q5k');
    const back = dequantizeWeights(q);
    const d = toNumbers('f16', q.scales);
    const layout = quantLayout('q5k', k);
    let high = 0;
    for (let i = 0; i < n * k; i++) {
      const row = Math.floor(i / k);
      const kk = i % k;
      const s = Math.floor(kk / 256);
      const { sc } = subBlockScaleMin(q.zeros!, row * 9 + 3 * s, (kk >> 5) & 7);
      if (codeAt(q.packed, layout, row, kk) > 15) high++;
      // The 6-bit scale may round below the sub-block's range / 31 by half of d, the min by half of dmin.
      expect(Math.abs(back[i]! - w[i]!)).toBeLessThanOrEqual(Math.fround(d[row * 3 + s]! * sc) + 1e-3);
    }
    expect(high).toBeGreaterThan((n * k) / 4);
    expect(() => quantizeWeights(new Float32Array(300), [1, 300], 'q5k')).toThrow(/K a multiple of 256/);
  });

  it('spans all 32 codes: a sub-block of two values takes codes 0 and 31', () => {
    const w = Float32Array.from({ length: 256 }, (_, i) => (i % 2 ? 1 : -0.5) * (1 + (i >> 5)));
    const q = quantizeWeights(w, [1, 256], 'q5k');
    const layout = quantLayout('q5k', 256);
    for (let i = 0; i < 256; i++) expect(codeAt(q.packed, layout, 0, i)).toBe(i % 2 ? 31 : 0);
  });
});

describe('q5g32 and q5g32a', () => {
  it('keep 5.5 and 6 bits per weight with f16 scales (and offsets), high words after the nibbles', () => {
    expect(quantLayout('q5g32', 896)).toMatchObject({ bits: 5, groups: 28, rowWords: 140, offset: 16 });
    expect(quantLayout('q5g32a', 33)).toMatchObject({ bits: 5, groups: 2, rowWords: 12, offsets: true });
    for (const [format, bits] of [
      ['q5g32', 5.5],
      ['q5g32a', 6],
    ] as const) {
      const q = quantizeWeights(gaussian(40, 3 * 896), [3, 896], format);
      expect(q.scaleDType).toBe('f16');
      const bytes = q.packed.byteLength + q.scales.byteLength + (q.offsets?.byteLength ?? 0);
      expect((8 * bytes) / (3 * 896)).toBe(bits);
    }
  });

  it('read back every code from its nibble and its group’s high word, a 16-byte word’s high bits in one word', () => {
    const rng = new Rng(41);
    const k = 70;
    const layout = quantLayout('q5g32', k);
    expect(layout.rowWords).toBe(16);
    // Every group's first code 31 (w = 15): scale f32(15 · f32(1 / 15)) = 1, the codes the weights plus 16.
    const codes = Array.from({ length: 2 * k }, (_, i) => ((i % k) % 32 === 0 ? 31 : rng.int(1, 32)));
    const w = Float32Array.from(codes, (q) => q - 16);
    const q = quantizeWeights(w, [2, k], 'q5g32', { scaleDType: 'f32' });
    for (let i = 0; i < 2 * k; i++) expect(codeAt(q.packed, layout, Math.floor(i / k), i % k)).toBe(codes[i]);
    for (let i = 0; i < 2 * k; i++)
      expect(q5g32Code(q.packed, Math.floor(i / k) * 16, 3, i % k)).toBe(codes[i]);
    // Group 1 of row 1, nibble word 3: its high word shifted by 6, masked as the kernels mask it.
    const high = q.packed[16 + 12 + 1]! >>> 6;
    const low = q.packed[16 + 4 + 3]!;
    const even = (low & 0x0f0f0f0f) | ((high << 4) & 0x10101010);
    const odd = ((low >>> 4) & 0x0f0f0f0f) | ((high << 3) & 0x10101010);
    const first = k + 32 + 24;
    expect([0, 1, 2, 3].map((b) => (even >>> (8 * b)) & 0xff)).toEqual(
      [0, 2, 4, 6].map((i) => codes[first + i]),
    );
    expect([0, 1, 2, 3].map((b) => (odd >>> (8 * b)) & 0xff)).toEqual(
      [1, 3, 5, 7].map((i) => codes[first + i]),
    );
    // The row's padding: codes 16 past K, high words past G zero.
    expect(codeAt(q.packed, layout, 0, 95)).toBe(16);
    expect(q.packed[15]).toBe(0);
  });

  it("give ggml's Q5_0 value f32((q − 16) · d) and Q5_1's f32(f32(d · q) + m) as q5g32a's f32(f32(q · d) − (−m))", () => {
    const rng = new Rng(42);
    const packed = Uint32Array.from({ length: 8 }, () => rng.int(0, 2 ** 32));
    const layout = quantLayout('q5g32', 32);
    const d = Math.fround(1 / 3000);
    const m = Math.fround(-0.0123);
    const base = { n: 1, k: 32, packed, scales: Float32Array.of(d), scaleDType: 'f32' } as const;
    const q0 = dequantizeWeights({ ...base, format: 'q5g32' });
    const q1 = dequantizeWeights({ ...base, format: 'q5g32a', offsets: Float32Array.of(-m) });
    for (let i = 0; i < 32; i++) {
      const q = codeAt(packed, layout, 0, i);
      expect(q0[i]).toBe(Math.fround((q - 16) * d));
      expect(q1[i]).toBe(Math.fround(Math.fround(d * q) + m));
    }
    expect(() => dequantizeWeights({ ...base, format: 'q5g32a' })).toThrow(/q5g32a needs offsets/);
  });

  it('quantize within half a step, use the high bit, and span all 32 codes', () => {
    const [n, k] = [4, 161];
    const w = gaussian(43, n * k);
    for (const format of ['q5g32', 'q5g32a'] as const) {
      const q = quantizeWeights(w, [n, k], format, { scaleDType: 'f32' });
      const back = dequantizeWeights(q);
      const layout = quantLayout(format, k);
      const scales = toNumbers('f32', q.scales);
      let high = 0;
      for (let i = 0; i < n * k; i++) {
        const at = Math.floor(i / k) * layout.groups + Math.floor((i % k) / 32);
        if (codeAt(q.packed, layout, Math.floor(i / k), i % k) > 15) high++;
        expect(Math.abs(back[i]! - w[i]!)).toBeLessThanOrEqual(scales[at]! * 0.5 + 1e-7);
      }
      expect(high).toBeGreaterThan((n * k) / 4);
    }
    const two = Float32Array.from({ length: 64 }, (_, i) => (i % 2 ? 1 : -0.5) * (1 + (i >> 5)));
    const q = quantizeWeights(two, [1, 64], 'q5g32a');
    for (let i = 0; i < 64; i++)
      expect(codeAt(q.packed, quantLayout('q5g32a', 64), 0, i)).toBe(i % 2 ? 31 : 0);
  });
});
