import { DTypeError, f32ToBf16Bits, f32ToF16Bits, InvalidArgumentError, RayoError } from '@rayo/core';
import { describe, expect, it } from 'vitest';
import type { RandomAccessFile } from './randomAccessFile.js';
import { encodeSafetensors } from './safetensors.js';
import { SafetensorsFile } from './safetensorsFile.js';

/** An in-memory file that records its reads. */
function memoryFile(bytes: Uint8Array, reads: [number, number][] = []): RandomAccessFile {
  return {
    name: 'memory.safetensors',
    size: bytes.length,
    read: async (into, position) => {
      reads.push([position, into.length]);
      into.set(bytes.subarray(position, position + into.length));
    },
    close: async () => {},
  };
}

const big = Float32Array.from({ length: 1000 }, (_, i) => i / 7 - 50);
const bytes = encodeSafetensors({
  big: { dtype: 'f32', shape: [10, 100], data: big },
  // 1.5, -2 and 0.15625 in bf16.
  half: { dtype: 'bf16', shape: [3], data: Uint16Array.of(0x3fc0, 0xc000, 0x3e20) },
  // The same values in f16.
  f16: { dtype: 'f16', shape: [3], data: Uint16Array.of(0x3e00, 0xc000, 0x3100) },
  ids: { dtype: 'i32', shape: [2], data: Int32Array.of(1, 2) },
});

describe('SafetensorsFile', () => {
  it('reads only the header when opened', async () => {
    const reads: [number, number][] = [];
    const file = await SafetensorsFile.open(memoryFile(bytes, reads));
    expect([...file.entries.keys()].sort()).toEqual(['big', 'f16', 'half', 'ids']);
    expect(file.entries.get('big')).toMatchObject({ format: 'F32', dtype: 'f32', shape: [10, 100] });
    expect(reads).toEqual([
      [0, 8],
      [8, file.header.dataStart - 8],
    ]);
  });

  it('reads a tensor at its offset in pieces of at most maxReadBytes', async () => {
    const reads: [number, number][] = [];
    const file = await SafetensorsFile.open(memoryFile(bytes, reads), { maxReadBytes: 1001 });
    reads.length = 0;
    expect(await file.readF32('big')).toEqual(big);
    // 4000 bytes in pieces of 1000 (whole elements), at the tensor's place in the file.
    const start = file.header.dataStart + file.entries.get('big')!.begin;
    expect(reads).toEqual([0, 1, 2, 3].map((i) => [start + 1000 * i, 1000]));
  });

  it('widens bf16 and f16 to f32 exactly, and names a tensor of another dtype', async () => {
    const file = await SafetensorsFile.open(memoryFile(bytes));
    expect(Array.from(await file.readF32('half'))).toEqual([1.5, -2, 0.15625]);
    expect(Array.from(await file.readF32('f16'))).toEqual([1.5, -2, 0.15625]);
    await expect(file.readF32('ids')).rejects.toThrow(DTypeError);
    await expect(file.readF32('ids')).rejects.toThrow(/'ids'.*expected F32, F16 or BF16.*got I32/);
    await expect(file.readF32('nothing')).rejects.toThrow(InvalidArgumentError);
  });

  it('reads half words as stored, and converts between float formats rounding once to nearest even', async () => {
    const file = await SafetensorsFile.open(memoryFile(bytes));
    expect(await file.readAs('half', 'bf16')).toEqual(Uint16Array.of(0x3fc0, 0xc000, 0x3e20));
    expect(await file.readAs('half', 'f16')).toEqual(Uint16Array.of(0x3e00, 0xc000, 0x3100));
    expect(await file.readAs('f16', 'bf16')).toEqual(Uint16Array.of(0x3fc0, 0xc000, 0x3e20));
    // f32 to half: the same words as core's conversion of each value (ties included).
    const values = Float32Array.from([
      ...big,
      1 + 2 ** -8,
      1 + 3 * 2 ** -8,
      -0,
      65520,
      1e-8,
      3.4028234663852886e38,
      -1e-40,
      Number.NaN,
    ]);
    const mixed = await SafetensorsFile.open(
      memoryFile(encodeSafetensors({ v: { dtype: 'f32', shape: [values.length], data: values } })),
    );
    expect(await mixed.readAs('v', 'bf16')).toEqual(Uint16Array.from(values, f32ToBf16Bits));
    expect(await mixed.readAs('v', 'f16')).toEqual(Uint16Array.from(values, f32ToF16Bits));
    await expect(file.readAs('ids', 'bf16')).rejects.toThrow(/'ids'.*got I32/);
  });

  it('validates the header like the in-memory decoder', async () => {
    await expect(SafetensorsFile.open(memoryFile(bytes.subarray(0, 5)))).rejects.toThrow(/too short/);
    await expect(SafetensorsFile.open(memoryFile(bytes.subarray(0, bytes.length - 4)))).rejects.toThrow(
      RayoError,
    );
    await expect(SafetensorsFile.open(memoryFile(bytes), { maxReadBytes: 2 })).rejects.toThrow(
      /maxReadBytes/,
    );
  });
});
