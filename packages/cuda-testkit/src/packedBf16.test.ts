import { type DeviceBuffer, PtxModule } from '@rayo/cuda-ptx';
import { describe, expect, it } from 'vitest';
import { f32ToBits } from './floatBits.js';
import { useInterpretedDevice } from './interpretedDevice.js';
import { fmaBf16, fmaBf16x2 } from './packedBf16.js';

const bf16 = (value: number) => f32ToBits(value) >>> 16;

describe('fma.rn.bf16x2 in the PTX interpreter', () => {
  it('rounds each half once, to nearest even', () => {
    // Magic-number decoding: (2048 + 16·q) / 16 − 128 is q exactly.
    expect(fmaBf16(bf16(2048 + 16 * 13), bf16(1 / 16), bf16(-128))).toBe(bf16(13));
    // 1 + 2^-8 is a tie between 1 and 1 + 2^-7: to the even 1; 1 + 3·2^-8 to 1 + 2^-6.
    expect(fmaBf16(bf16(1), bf16(1), bf16(2 ** -8))).toBe(bf16(1));
    expect(fmaBf16(bf16(1 + 2 ** -7), bf16(1), bf16(2 ** -8))).toBe(bf16(1 + 2 ** -6));
    // (1 + 2^-4)² = 1 + 2^-3 + 2^-8 is a tie, to the even 1 + 2^-3; with 2^-70 added (lost in a double's
    // sum) it lies past the tie and rounds up.
    const a = bf16(1 + 2 ** -4);
    expect(fmaBf16(a, a, bf16(0))).toBe(bf16(1 + 2 ** -3));
    expect(fmaBf16(a, a, bf16(2 ** -70))).toBe(bf16(1 + 2 ** -3 + 2 ** -7));
    expect(fmaBf16(a, a, bf16(-(2 ** -70)))).toBe(bf16(1 + 2 ** -3));
    // Past bf16's range, NaN and signed zeros.
    expect(fmaBf16(bf16(2 ** 127), bf16(4), bf16(0))).toBe(0x7f80);
    expect(fmaBf16(0x7fc0, bf16(1), bf16(1))).toBe(0x7fff);
    expect(fmaBf16(bf16(-0), bf16(1), bf16(-0))).toBe(0x8000);
    expect(fmaBf16x2((bf16(3) << 16) | bf16(2), (bf16(2) << 16) | bf16(2), (bf16(1) << 16) | bf16(-4))).toBe(
      ((bf16(7) << 16) | bf16(0)) >>> 0,
    );
  });

  const device = useInterpretedDevice();
  it('runs in a kernel, one word of each operand per thread', () => {
    const module = () => {
      const m = new PtxModule({ target: 'sm_80' });
      m.entry('fma2', { a: 'ptr', d: 'ptr' }, (k, p) => {
        const at = k.elementAddress(k.globalPointer(p.a), k.mulLo('u32', k.reg('u32'), k.tid(), 3), 4);
        const [a, b, c] = [0, 4, 8].map((o) => k.ldGlobal('b32', k.reg('u32'), { base: at, offset: o }));
        const d = k.fmaBf16x2(k.reg('u32'), a!, b!, c!);
        k.stGlobal('b32', k.elementAddress(k.globalPointer(p.d), k.tid(), 4), d);
      });
      return m;
    };
    const words = Uint32Array.from(
      { length: 3 * 32 },
      (_, i) => (Math.imul(i + 1, 2654435761) >>> 0) & 0x3fff3fff,
    );
    const [a, d] = [words, 32].map((w) => device.buffer(w)) as [DeviceBuffer, DeviceBuffer];
    device.launch(module, 'fma2', { block: 32 }, { a: a.ptr, d: d.ptr });
    const out = device.read(d, 32);
    out.forEach((got, t) => {
      expect(got).toBe(fmaBf16x2(words[3 * t]!, words[3 * t + 1]!, words[3 * t + 2]!));
    });
  });
});
