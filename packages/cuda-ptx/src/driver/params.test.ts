import { InvalidArgumentError } from '@rayo/core';
import { describe, expect, it } from 'vitest';
import type { ParamInfo } from '../ptx/module.js';
import { checkParamValue, kernelParamBytes, writeKernelParams } from './params.js';
import { DevicePool } from './pool.js';

const param = (name: string, type: ParamInfo['type']): ParamInfo => ({
  name,
  type,
  bytes: type === 'u32' || type === 's32' || type === 'f32' ? 4 : 8,
});

describe('kernel parameter marshalling', () => {
  it('puts tensor maps after the slots, 64-byte aligned, and points at them', () => {
    const params: ParamInfo[] = [param('n', 'u32'), { name: 'map', type: 'tensorMap', bytes: 128 }];
    const bytes = kernelParamBytes(params);
    expect(bytes).toBe(2 * 16 + 128 + 64);
    const block = new Uint8Array(bytes);
    const base = 0x7000_1008n;
    const map = Uint8Array.from({ length: 128 }, (_, i) => i + 1);
    writeKernelParams(params, [5, map], block, base);
    const v = new DataView(block.buffer);
    const at = v.getBigUint64(8, true);
    expect(at % 64n).toBe(0n);
    expect(at >= base + 32n).toBe(true);
    const offset = Number(at - base);
    expect([...block.subarray(offset, offset + 128)]).toEqual([...map]);
    expect(v.getUint32(16, true)).toBe(5);
    expect(() => checkParamValue('k', params[1]!, new Uint8Array(64))).toThrow(/128-byte Uint8Array/);
    expect(checkParamValue('k', params[1]!, map)).toBe(map);
  });

  it('lays out a pointer table followed by 8-byte little-endian value slots', () => {
    const params = [
      param('x', 'ptr'),
      param('n', 'u32'),
      param('alpha', 'f32'),
      param('k', 's32'),
      param('off', 's64'),
    ];
    const block = new Uint8Array(kernelParamBytes(params.length) + 16).fill(0xee);
    const base = 0x7000_1000n;
    writeKernelParams(params, [0x7f00_0000_1200n, 4097, -2.5, -7, -3n], block, base);
    const v = new DataView(block.buffer);
    // Table: entry i points at base + 8·5 + 8·i.
    expect([0, 1, 2, 3, 4].map((i) => v.getBigUint64(8 * i, true))).toEqual(
      [40n, 48n, 56n, 64n, 72n].map((o) => base + o),
    );
    expect([...block.subarray(40, 48)]).toEqual([0x00, 0x12, 0x00, 0x00, 0x00, 0x7f, 0x00, 0x00]);
    // u32 4097 = 0x1001, with the slot's high half zeroed (it held 0xee before).
    expect([...block.subarray(48, 56)]).toEqual([0x01, 0x10, 0, 0, 0, 0, 0, 0]);
    // f32 -2.5 = 0xC0200000.
    expect([...block.subarray(56, 60)]).toEqual([0x00, 0x00, 0x20, 0xc0]);
    expect(v.getInt32(64, true)).toBe(-7);
    expect(v.getBigInt64(72, true)).toBe(-3n);
    // Nothing past the block for five parameters is touched.
    expect([...block.subarray(80)]).toEqual(new Array(16).fill(0xee));
  });

  it('refuses a block that is too small or a value list of the wrong length', () => {
    const params = [param('n', 'u32')];
    expect(() => writeKernelParams(params, [], new Uint8Array(16), 0n)).toThrow(InvalidArgumentError);
    expect(() => writeKernelParams(params, [1], new Uint8Array(8), 0n)).toThrow(InvalidArgumentError);
  });

  it('checks each value against its parameter type and names it', () => {
    expect(checkParamValue('k', param('n', 'u32'), 2 ** 32 - 1)).toBe(2 ** 32 - 1);
    expect(checkParamValue('k', param('p', 'ptr'), 4096)).toBe(4096n);
    expect(checkParamValue('k', param('q', 's64'), -(2 ** 40))).toBe(-(2n ** 40n));
    expect(checkParamValue('k', param('f', 'f32'), Number.NaN)).toBeNaN();
    const bad: [ParamInfo, unknown][] = [
      [param('n', 'u32'), -1],
      [param('n', 'u32'), 1.5],
      [param('n', 'u32'), 2 ** 32],
      [param('n', 'u32'), 3n],
      [param('i', 's32'), 2 ** 31],
      [param('f', 'f32'), '1'],
      [param('p', 'ptr'), 0n],
      [param('p', 'ptr'), -4n],
      [param('p', 'ptr'), 2 ** 60],
      [param('u', 'u64'), 2n ** 64n],
      [param('s', 's64'), 2n ** 63n],
    ];
    for (const [p, value] of bad) {
      let caught: unknown;
      try {
        checkParamValue('elementwise/binary/add/rank1', p, value);
      } catch (error) {
        caught = error;
      }
      expect(caught, `${p.type} ${String(value)}`).toBeInstanceOf(InvalidArgumentError);
      const e = caught as InvalidArgumentError;
      expect(e.operation).toBe('elementwise/binary/add/rank1');
      expect(e.argument).toBe(`args.${p.name}`);
    }
  });
});

describe('device allocation pool', () => {
  it('carves blocks from one segment, merges them back when freed, and frees the segment on trim', () => {
    const made: bigint[] = [];
    const freed: bigint[] = [];
    let next = 0x1000n;
    const pool = new DevicePool(
      (bytes) => {
        made.push(next);
        next += BigInt(bytes);
        return made.at(-1)!;
      },
      (ptrs) => freed.push(...ptrs),
    );
    const a = pool.acquire(100);
    expect([a.ptr, a.bytes]).toEqual([0x1000n, 512]);
    pool.release(a);
    const b = pool.acquire(200);
    expect(b.ptr).toBe(a.ptr);
    expect([pool.created, pool.reused]).toEqual([1, 1]);
    const c = pool.acquire(600);
    // Same segment, right after b.
    expect([c.ptr, c.bytes]).toEqual([0x1000n + 512n, 1024]);
    pool.release(b);
    pool.release(c);
    expect(pool.pooledBytes).toBe(2 * 2 ** 20);
    pool.trim();
    expect(freed).toEqual([0x1000n]);
    expect(pool.pooledBytes).toBe(0);
  });
});
