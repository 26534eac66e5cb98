import { describe, expect, it } from 'vitest';
import { partChecksum, partChecksumScalar, partChecksumUsesSimd } from './partChecksum.js';

function randomBytes(length: number, seed: number): Uint8Array {
  const bytes = new Uint8Array(length);
  let x = seed >>> 0 || 1;
  for (let i = 0; i < length; i++) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    bytes[i] = x & 0xff;
  }
  return bytes;
}

describe('partChecksum', () => {
  it('runs on WebAssembly SIMD here (Node 20 has it)', () => {
    expect(partChecksumUsesSimd()).toBe(true);
  });

  it('equals the reference at every length class: steps, tail words, tail bytes, several 64 KiB blocks', () => {
    const lengths = [
      0,
      1,
      3,
      4,
      7,
      124,
      128,
      129,
      131,
      132,
      255,
      4096 + 12,
      65535,
      65536,
      65536 + 3,
      65536 * 2 + 130,
      (1 << 22) + 128 * 3 + 4 * 5 + 2,
    ];
    for (const [i, length] of lengths.entries()) {
      const bytes = randomBytes(length, 1000 + i);
      expect(partChecksum(bytes), `${length} bytes`).toBe(partChecksumScalar(bytes));
    }
  });

  it('takes typed arrays of any element and offset (a view not on a word is copied first)', () => {
    const bytes = randomBytes(4099, 7);
    const odd = bytes.subarray(3, 3 + 2050);
    expect(partChecksum(odd)).toBe(partChecksumScalar(odd.slice()));
    const halves = new Uint16Array(bytes.buffer, 2, 1000);
    expect(partChecksum(halves)).toBe(partChecksumScalar(new Uint8Array(bytes.buffer, 2, 2000).slice()));
  });

  it('changes with any one changed byte, in a lane, a tail word and a tail byte', () => {
    const bytes = randomBytes(128 * 40 + 4 * 3 + 2, 11);
    const original = partChecksum(bytes);
    for (const at of [0, 1, 127, 128 * 20 + 65, 128 * 40 + 5, bytes.length - 1]) {
      const changed = bytes.slice();
      changed[at]! ^= 1 << (at % 8);
      expect(partChecksum(changed), `byte ${at}`).not.toBe(original);
      expect(partChecksumScalar(changed)).toBe(partChecksum(changed));
    }
  });

  it('tells apart data that differs only in length', () => {
    const bytes = randomBytes(256, 5);
    expect(partChecksum(bytes.subarray(0, 255))).not.toBe(partChecksum(bytes));
    expect(partChecksum(new Uint8Array(8))).not.toBe(partChecksum(new Uint8Array(12)));
  });
});
