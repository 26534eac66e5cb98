import { RayoError } from '@rayo/core';
import { describe, expect, it } from 'vitest';
import { decodeSafetensors, encodeSafetensors, type StoredTensor } from './safetensors.js';

function file(header: object, data: Uint8Array): Uint8Array {
  const json = new TextEncoder().encode(JSON.stringify(header));
  const out = new Uint8Array(8 + json.length + data.length);
  new DataView(out.buffer).setBigUint64(0, BigInt(json.length), true);
  out.set(json, 8);
  out.set(data, 8 + json.length);
  return out;
}

describe('safetensors', () => {
  it('round-trips every dtype with metadata', () => {
    const tensors = new Map<string, StoredTensor>([
      ['w', { dtype: 'f32', shape: [2, 2], data: Float32Array.of(1.5, -2, 3.25, 0) }],
      ['ids', { dtype: 'i32', shape: [3], data: Int32Array.of(-1, 0, 7) }],
      ['u', { dtype: 'u32', shape: [1], data: Uint32Array.of(4_000_000_000) }],
      ['h', { dtype: 'f16', shape: [2], data: Uint16Array.of(0x3c00, 0xc000) }],
      ['b', { dtype: 'bf16', shape: [1, 1, 1], data: Uint16Array.of(0x3f80) }],
      ['empty', { dtype: 'f32', shape: [0, 3], data: new Float32Array(0) }],
      ['scalar', { dtype: 'f32', shape: [], data: Float32Array.of(9) }],
    ]);
    const bytes = encodeSafetensors(tensors, { step: '12', note: 'hi' });
    const decoded = decodeSafetensors(bytes);
    expect(decoded.metadata).toEqual({ step: '12', note: 'hi' });
    expect([...decoded.tensors.keys()].sort()).toEqual([...tensors.keys()].sort());
    for (const [name, t] of tensors) {
      const d = decoded.tensors.get(name)!;
      expect(d.dtype).toBe(t.dtype);
      expect(d.shape).toEqual(t.shape);
      expect(d.data.constructor).toBe(t.data.constructor);
      expect(Array.from(d.data)).toEqual(Array.from(t.data));
    }
  });

  it('writes the layout of the format: u64 LE header length, JSON padded to 8 bytes, LE data', () => {
    const bytes = encodeSafetensors({ a: { dtype: 'f32', shape: [2], data: Float32Array.of(1, 2) } });
    const headerLength = Number(new DataView(bytes.buffer).getBigUint64(0, true));
    expect(headerLength % 8).toBe(0);
    const header = JSON.parse(new TextDecoder().decode(bytes.subarray(8, 8 + headerLength)));
    expect(header).toEqual({ a: { dtype: 'F32', shape: [2], data_offsets: [0, 8] } });
    const data = new DataView(bytes.buffer, 8 + headerLength);
    expect([data.getFloat32(0, true), data.getFloat32(4, true)]).toEqual([1, 2]);
    expect(bytes.length).toBe(8 + headerLength + 8);
  });

  it('reads a file written by another implementation', () => {
    const data = new Uint8Array(12);
    const view = new DataView(data.buffer);
    view.setInt32(0, 5, true);
    view.setFloat32(4, 0.5, true);
    view.setFloat32(8, -1, true);
    const bytes = file(
      {
        __metadata__: { format: 'pt' },
        y: { dtype: 'F32', shape: [2], data_offsets: [4, 12] },
        x: { dtype: 'I32', shape: [1], data_offsets: [0, 4] },
      },
      data,
    );
    const { tensors, metadata } = decodeSafetensors(bytes);
    expect(metadata).toEqual({ format: 'pt' });
    expect(Array.from(tensors.get('x')!.data)).toEqual([5]);
    expect(Array.from(tensors.get('y')!.data)).toEqual([0.5, -1]);
  });

  it('rejects malformed files with a reason', () => {
    const f32 = (offsets: number[]) => ({ dtype: 'F32', shape: [1], data_offsets: offsets });
    const cases: [Uint8Array, RegExp][] = [
      [new Uint8Array(4), /too short/],
      [file({ a: f32([0, 4]) }, new Uint8Array(4)).subarray(0, 20), /header length/],
      [
        file({ a: { dtype: 'F64', shape: [1], data_offsets: [0, 8] } }, new Uint8Array(8)),
        /unsupported dtype/,
      ],
      [file({ a: f32([0, 8]) }, new Uint8Array(8)), /do not fit/],
      [file({ a: f32([0, 4]), b: f32([2, 6]) }, new Uint8Array(8)), /does not start/],
      [file({ a: f32([0, 4]) }, new Uint8Array(8)), /no tensor owns/],
      [file({ a: { dtype: 'F32', shape: [-1], data_offsets: [0, 4] } }, new Uint8Array(4)), /invalid shape/],
    ];
    for (const [bytes, message] of cases) {
      expect(() => decodeSafetensors(bytes)).toThrow(RayoError);
      expect(() => decodeSafetensors(bytes)).toThrow(message);
    }
  });

  it('refuses data that does not match its dtype or shape', () => {
    expect(() => encodeSafetensors({ a: { dtype: 'f32', shape: [3], data: Float32Array.of(1, 2) } })).toThrow(
      /does not match/,
    );
    expect(() => encodeSafetensors({ a: { dtype: 'i32', shape: [1], data: Float32Array.of(1) } })).toThrow(
      /does not match/,
    );
  });
});
