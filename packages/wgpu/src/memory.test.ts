import { OutOfMemoryError } from '@rayo/core';
import { describe, expect, it } from 'vitest';
import { BufferPool } from './buffers.js';
import { DeviceMemory } from './memory.js';

/** A device whose allocations of `refuse` bytes or more fail as out of memory. */
function fakeDevice(refuse: number) {
  const scopes: (GPUError | null)[] = [];
  const destroyed: number[] = [];
  const device = {
    limits: { maxBufferSize: 2 ** 40 },
    pushErrorScope: () => scopes.push(null),
    popErrorScope: () => Promise.resolve(scopes.pop() ?? null),
    createBuffer: (d: GPUBufferDescriptor) => {
      if (d.size >= refuse) scopes[scopes.length - 1] = { message: 'out of device memory' } as GPUError;
      return { size: d.size, label: d.label, destroy: () => destroyed.push(d.size) } as unknown as GPUBuffer;
    },
  };
  return { device: device as unknown as GPUDevice, destroyed };
}

describe('device memory', () => {
  it('throws at the allocating call beyond the budget, after freeing pooled buffers', () => {
    const { device, destroyed } = fakeDevice(Number.POSITIVE_INFINITY);
    const memory = new DeviceMemory(device, 4096);
    const pool = new BufferPool(memory, 0, 'rayo tensor');
    pool.release(pool.acquire(2048, 'empty'));
    const held = pool.acquire(3000, 'upload');
    expect(destroyed).toEqual([2048]);
    expect(memory.usedBytes).toBe(3072);
    let error: unknown;
    try {
      pool.acquire(2048, 'zeros');
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(OutOfMemoryError);
    expect((error as OutOfMemoryError).kernel).toBe('zeros');
    expect((error as OutOfMemoryError).message).toContain('rayo tensor would exceed the memory budget');
    expect((error as OutOfMemoryError).actual).toBe('2048 bytes');
    pool.release(held);
    expect(pool.acquire(4096, 'zeros').size).toBe(4096);
  });

  it('reports what the device refused, naming the call and the size, and never pools that buffer', async () => {
    const { device, destroyed } = fakeDevice(1 << 20);
    const memory = new DeviceMemory(device, Number.POSITIVE_INFINITY);
    const pool = new BufferPool(memory, 0, 'rayo tensor');
    const small = pool.acquire(1024, 'upload');
    const big = pool.acquire(1 << 20, 'empty');
    const failure = await memory.takeFailure('read');
    expect(failure).toBeInstanceOf(OutOfMemoryError);
    expect(failure?.kernel).toBe('empty');
    expect(failure?.message).toContain(
      `rayo tensor of ${1 << 20} bytes (reported by read: out of device memory)`,
    );
    expect(memory.failed(big)).toBe(true);
    pool.release(big);
    expect(destroyed).toEqual([1 << 20]);
    // After a refusal, freed buffers go back to the device instead of the pool
    // until an allocation is known to have succeeded.
    pool.release(small);
    expect(destroyed).toEqual([1 << 20, 1024]);
    expect(await memory.takeFailure('sync')).toBeUndefined();
    expect(memory.short).toBe(true);
    pool.release(pool.acquire(512, 'empty'));
    expect(destroyed).toEqual([1 << 20, 1024, 512]);
    expect(await memory.takeFailure('sync')).toBeUndefined();
    expect(memory.short).toBe(false);
    pool.release(pool.acquire(512, 'empty'));
    expect(destroyed).toEqual([1 << 20, 1024, 512]);
  });
});
