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
    expect((error as OutOfMemoryError).operation).toBe('zeros');
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
    expect(failure?.operation).toBe('empty');
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

/**
 * A device of `capacity` bytes that frees like Dawn: a destroyed buffer's
 * memory returns only once a queue round made after the destroy completed.
 */
function deferringDevice(capacity: number) {
  const scopes: (GPUError | null)[] = [];
  const state = { free: capacity, deferred: 0, rounds: 0, refused: 0 };
  const device = {
    limits: { maxBufferSize: 2 ** 40 },
    pushErrorScope: () => scopes.push(null),
    popErrorScope: () => Promise.resolve(scopes.pop() ?? null),
    createBuffer: (d: GPUBufferDescriptor) => {
      const granted = d.size <= state.free;
      if (granted) state.free -= d.size;
      else {
        state.refused++;
        scopes[scopes.length - 1] = { message: 'VK_ERROR_OUT_OF_DEVICE_MEMORY' } as GPUError;
      }
      let destroyed = false;
      return {
        size: d.size,
        label: d.label,
        destroy: () => {
          if (destroyed || !granted) return;
          destroyed = true;
          state.deferred += d.size;
        },
      } as unknown as GPUBuffer;
    },
  };
  const round = async () => {
    state.rounds++;
    state.free += state.deferred;
    state.deferred = 0;
  };
  return { device: device as unknown as GPUDevice, state, round };
}

describe('device memory: frees that reach the driver late', () => {
  const KIB = 1024;

  /** Device memory and a tensor pool over a 4 KiB device whose frees reach the driver at the next queue round. */
  function deferringMemory() {
    const { device, state, round } = deferringDevice(4 * KIB);
    const memory = new DeviceMemory(device, Number.POSITIVE_INFINITY);
    memory.setQueueRound(round);
    return { state, memory, pool: new BufferPool(memory, 0, 'rayo tensor') };
  }

  /** Fills the device, has the next allocation refused, frees everything. */
  async function refusedThenFreed(memory: DeviceMemory, pool: BufferPool) {
    const held = Array.from({ length: 4 }, () => pool.acquire(KIB, 'zeros'));
    const over = pool.acquire(KIB, 'zeros');
    const refused = await memory.takeFailure('sync');
    expect(refused).toBeInstanceOf(OutOfMemoryError);
    // A real shortage, nothing freed: no retry.
    expect(memory.recovery).toEqual({ releases: 0, waits: 0, retried: 0, recovered: 0 });
    for (const b of [...held, over]) pool.release(b);
  }

  it('retries a refused fresh allocation once the frees were pushed through the queue', async () => {
    const { state, memory, pool } = deferringMemory();
    await refusedThenFreed(memory, pool);
    expect(state.deferred).toBe(4 * KIB);
    // Allocated before any queue round: the device still holds the freed memory.
    const fresh = pool.acquire(3 * KIB, 'zeros');
    let replaced: GPUBuffer | undefined;
    memory.retriable(fresh, (b) => {
      replaced = b;
    });
    expect(await memory.takeReport('sync')).toEqual({ retried: 1 });
    expect(state.refused).toBe(2);
    expect(replaced?.size).toBe(3 * KIB);
    expect(memory.failed(replaced!)).toBe(false);
    expect(memory.recovery).toEqual({ releases: 1, waits: 2, retried: 1, recovered: 1 });
    expect(memory.usedBytes).toBe(3 * KIB);
    expect(memory.short).toBe(false);
  });

  it('release() pushes what was freed after a refusal to the driver, so the next allocation is granted', async () => {
    const { state, memory, pool } = deferringMemory();
    await refusedThenFreed(memory, pool);
    expect(memory.unreleasedBytes).toBe(4 * KIB);
    expect(await memory.release()).toBe(2);
    expect(state).toMatchObject({ free: 4 * KIB, deferred: 0, rounds: 2 });
    expect(memory.unreleasedBytes).toBe(0);
    // Nothing left to push: no more rounds.
    expect(await memory.release()).toBe(0);
    pool.acquire(4 * KIB, 'zeros');
    expect(await memory.takeFailure('sync')).toBeUndefined();
    expect(memory.recovery).toMatchObject({ releases: 1, waits: 2, retried: 0 });
  });

  it('keeps a real shortage an OutOfMemoryError after a bounded retry, saying what was tried', async () => {
    const { state, memory, pool } = deferringMemory();
    const kept = pool.acquire(3 * KIB, 'upload');
    pool.release(pool.acquire(KIB, 'zeros'));
    pool.trim();
    // 1 KiB freed but not yet back; 3 KiB held: 2 KiB cannot be had even after the release.
    const fresh = pool.acquire(2 * KIB, 'zeros');
    let replaced = false;
    memory.retriable(fresh, () => {
      replaced = true;
    });
    const error = await memory.takeFailure('read');
    expect(error).toBeInstanceOf(OutOfMemoryError);
    expect(error?.operation).toBe('zeros');
    expect(error?.expected).toBe(`${2 * KIB} bytes free on the device`);
    expect(error?.message).toContain('VK_ERROR_OUT_OF_DEVICE_MEMORY');
    expect(error?.message).toContain(
      '1 release(s) of freed memory (2 queue waits) and 1 retried allocation(s)',
    );
    expect(replaced).toBe(false);
    // One retry: nothing more was freed after it, so a second would fail too.
    expect(memory.recovery).toEqual({ releases: 1, waits: 2, retried: 1, recovered: 0 });
    expect(state.rounds).toBe(2);
    expect(memory.failed(fresh)).toBe(true);
    pool.release(kept);
  });

  it('does not retry a refused buffer that was used, but still releases the frees for the next allocation', async () => {
    const { state, memory, pool } = deferringMemory();
    pool.release(pool.acquire(4 * KIB, 'zeros'));
    pool.trim();
    const written = pool.acquire(2 * KIB, 'upload');
    memory.retriable(written, () => {
      throw new Error('a written buffer must not be replaced');
    });
    memory.touch(written);
    const error = await memory.takeFailure('sync');
    expect(error).toBeInstanceOf(OutOfMemoryError);
    expect(error?.operation).toBe('upload');
    expect(memory.recovery).toMatchObject({ releases: 1, retried: 0 });
    expect(state).toMatchObject({ free: 4 * KIB, deferred: 0 });
    pool.release(written);
    pool.acquire(4 * KIB, 'zeros');
    expect(await memory.takeFailure('sync')).toBeUndefined();
  });
});
