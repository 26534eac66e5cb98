import { describe, expect, it } from 'vitest';
import { OutOfMemoryError, RayoError } from '../errors.js';
import { CachingAllocator, type DeviceBlock } from './cachingAllocator.js';
import { ScratchArena } from './scratchArena.js';
import { LARGE_SEGMENT_BYTES, SMALL_SEGMENT_BYTES } from './sizeClasses.js';

const MIB = 2 ** 20;

/** A device of `capacity` bytes whose segments are numbered; it can be told to refuse the next allocations. */
class FakeDevice {
  readonly live = new Map<number, number>();
  readonly log: string[] = [];
  refuseNext = 0;
  uncacheable = new Set<number>();
  #next = 1;
  constructor(public capacity: number) {}
  get used(): number {
    return [...this.live.values()].reduce((a, b) => a + b, 0);
  }
  allocate(bytes: number, api: string): number {
    if (this.refuseNext > 0 || this.used + bytes > this.capacity) {
      if (this.refuseNext > 0) this.refuseNext--;
      this.log.push(`refused ${bytes}`);
      throw new OutOfMemoryError(`device refused ${bytes} bytes`, { operation: api });
    }
    const id = this.#next++;
    this.live.set(id, bytes);
    this.log.push(`allocate ${bytes}`);
    return id;
  }
  release(handles: readonly number[]): void {
    for (const h of handles) {
      expect(this.live.has(h)).toBe(true);
      this.live.delete(h);
    }
    this.log.push(`release ${handles.length}`);
  }
  cacheable(handle: number): boolean {
    return !this.uncacheable.has(handle);
  }
}

function allocatorOn(device: FakeDevice, splitting = true, maxCachedBytes?: number) {
  return new CachingAllocator<number>(device, {
    splitting,
    ...(maxCachedBytes !== undefined ? { maxCachedBytes } : {}),
  });
}

describe('CachingAllocator with splitting', () => {
  it('carves small blocks out of one 2 MiB segment at distinct offsets', () => {
    const device = new FakeDevice(64 * MIB);
    const alloc = allocatorOn(device);
    const a = alloc.allocate(1000, 'a');
    const b = alloc.allocate(3000, 'b');
    expect(a.handle).toBe(b.handle);
    expect([a.offset, a.size, b.offset, b.size]).toEqual([0, 1024, 1024, 3072]);
    expect(device.log).toEqual([`allocate ${SMALL_SEGMENT_BYTES}`]);
    expect(alloc.stats()).toMatchObject({
      allocatedBytes: 4096,
      reservedBytes: SMALL_SEGMENT_BYTES,
      segmentsAllocated: 1,
    });
  });

  it('merges freed neighbours back so that a larger block fits where small ones were', () => {
    const device = new FakeDevice(64 * MIB);
    const alloc = allocatorOn(device);
    const blocks = [1, 2, 3, 4].map(() => alloc.allocate(256 * 1024, 'x'));
    const tail = alloc.allocate(512, 'tail');
    // Freed out of order: the middle ones merge with each other, then with the first.
    alloc.free(blocks[1]!);
    alloc.free(blocks[2]!);
    alloc.free(blocks[0]!);
    const big = alloc.allocate(768 * 1024, 'big');
    expect(big.handle).toBe(tail.handle);
    expect(big.offset).toBe(0);
    expect(device.log).toEqual([`allocate ${SMALL_SEGMENT_BYTES}`]);
    alloc.free(big);
    alloc.free(blocks[3]!);
    alloc.free(tail);
    // Everything idle again: one block covering the segment, released whole.
    expect(alloc.stats()).toMatchObject({ allocatedBytes: 0, reservedBytes: SMALL_SEGMENT_BYTES });
    expect(alloc.emptyCache()).toBe(SMALL_SEGMENT_BYTES);
    expect(device.live.size).toBe(0);
    expect(alloc.stats().reservedBytes).toBe(0);
  });

  it('uses the best-fitting idle block, and keeps small and large pools apart', () => {
    const device = new FakeDevice(256 * MIB);
    const alloc = allocatorOn(device);
    const large = alloc.allocate(3 * MIB, 'large');
    expect(device.log).toEqual([`allocate ${LARGE_SEGMENT_BYTES}`]);
    const small = alloc.allocate(4096, 'small');
    expect(small.handle).not.toBe(large.handle);
    const big = alloc.allocate(18 * MIB, 'own segment');
    expect(device.log.at(-1)).toBe(`allocate ${18 * MIB}`);
    alloc.free(big);
    // 5 MiB fits the rest of the 20 MiB segment (17 MiB) better than the idle 18 MiB one.
    const mid = alloc.allocate(5 * MIB, 'mid');
    expect(mid.handle).toBe(large.handle);
    expect(mid.offset).toBe(3 * MIB);
  });

  it('releases the cache and retries once before an OutOfMemoryError, counting both', () => {
    const device = new FakeDevice(24 * MIB);
    const alloc = allocatorOn(device);
    const a = alloc.allocate(12 * MIB, 'a');
    alloc.free(a);
    // The idle 12 MiB segment leaves no room for 16 MiB until it is released.
    const b = alloc.allocate(16 * MIB, 'b');
    expect(device.log).toEqual([
      `allocate ${12 * MIB}`,
      `refused ${16 * MIB}`,
      'release 1',
      `allocate ${16 * MIB}`,
    ]);
    expect(alloc.stats()).toMatchObject({ allocationRetries: 1, outOfMemoryErrors: 0 });
    const c = alloc.allocate(4 * MIB, 'c');
    device.refuseNext = 4;
    const mark = device.log.length;
    let error: unknown;
    try {
      alloc.allocate(12 * MIB, 'zeros');
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(OutOfMemoryError);
    expect((error as OutOfMemoryError).operation).toBe('zeros');
    expect((error as Error).message).toMatch(
      /device refused 12582912 bytes; 20971520 bytes allocated and 20971520 reserved/,
    );
    expect(alloc.stats()).toMatchObject({ allocationRetries: 2, outOfMemoryErrors: 1 });
    // One retry: refused, nothing idle to release, refused again.
    expect(device.log.slice(mark)).toEqual([`refused ${12 * MIB}`, `refused ${12 * MIB}`]);
    alloc.free(b);
    alloc.free(c);
  });

  it('asks for just the block when a whole segment does not fit', () => {
    const device = new FakeDevice(6 * MIB);
    const alloc = allocatorOn(device);
    const a = alloc.allocate(5 * MIB, 'a');
    expect(a.size).toBe(5 * MIB);
    expect(device.log).toEqual([`refused ${LARGE_SEGMENT_BYTES}`, `allocate ${5 * MIB}`]);
    expect(alloc.stats().allocationRetries).toBe(0);
  });

  it('passes errors other than out of memory through untouched, without a retry', () => {
    const alloc = new CachingAllocator<number>(
      {
        allocate: () => {
          throw new RayoError('lost');
        },
        release: () => {},
      },
      { splitting: true },
    );
    expect(() => alloc.allocate(16, 'x')).toThrow('lost');
    expect(alloc.stats().allocationRetries).toBe(0);
  });

  it('keeps at most maxCachedBytes idle, releasing wholly idle segments largest first', () => {
    const device = new FakeDevice(256 * MIB);
    const alloc = allocatorOn(device, true, 16 * MIB);
    const a = alloc.allocate(12 * MIB, 'a');
    const b = alloc.allocate(14 * MIB, 'b');
    const c = alloc.allocate(1000, 'c');
    alloc.free(a);
    expect(alloc.stats().reservedBytes).toBe(12 * MIB + 14 * MIB + SMALL_SEGMENT_BYTES);
    alloc.free(b);
    // 12 + 14 MiB idle > 16 MiB: the 14 MiB segment goes.
    expect(alloc.stats().reservedBytes).toBe(12 * MIB + SMALL_SEGMENT_BYTES);
    alloc.free(c);
    expect([...device.live.values()].sort()).toEqual([SMALL_SEGMENT_BYTES, 12 * MIB].sort());
    alloc.setMaxCachedBytes(0);
    expect(device.live.size).toBe(0);
  });

  it('frees a segment the device says must not be cached', () => {
    const device = new FakeDevice(256 * MIB);
    const alloc = allocatorOn(device, false);
    const a = alloc.allocate(1000, 'a');
    device.uncacheable.add(a.handle);
    alloc.free(a);
    expect(device.live.size).toBe(0);
    expect(alloc.stats().reservedBytes).toBe(0);
  });

  it('tracks peaks of allocated and reserved bytes', () => {
    const device = new FakeDevice(256 * MIB);
    const alloc = allocatorOn(device);
    const blocks = [alloc.allocate(MIB, 'a'), alloc.allocate(MIB, 'b')];
    for (const b of blocks) alloc.free(b);
    alloc.emptyCache();
    expect(alloc.stats()).toMatchObject({
      allocatedBytes: 0,
      peakAllocatedBytes: 2 * MIB,
      reservedBytes: 0,
      peakReservedBytes: SMALL_SEGMENT_BYTES,
    });
  });

  it('starts its peaks again from what is in use and held at resetPeaks()', () => {
    const device = new FakeDevice(256 * MIB);
    const alloc = allocatorOn(device);
    const kept = alloc.allocate(MIB, 'kept');
    alloc.free(alloc.allocate(3 * MIB, 'gone'));
    alloc.emptyCache();
    expect(alloc.stats().peakAllocatedBytes).toBe(4 * MIB);
    alloc.resetPeaks();
    expect(alloc.stats()).toMatchObject({
      allocatedBytes: MIB,
      peakAllocatedBytes: MIB,
      reservedBytes: SMALL_SEGMENT_BYTES,
      peakReservedBytes: SMALL_SEGMENT_BYTES,
    });
    alloc.free(alloc.allocate(MIB, 'next'));
    expect(alloc.stats().peakAllocatedBytes).toBe(2 * MIB);
    alloc.free(kept);
  });
});

describe('CachingAllocator without splitting', () => {
  it('hands out whole segments of the size bucket, reused only for the same bucket', () => {
    const device = new FakeDevice(256 * MIB);
    const alloc = allocatorOn(device, false);
    const a = alloc.allocate(1000, 'a');
    expect([a.offset, a.size]).toEqual([0, 1024]);
    alloc.free(a);
    const b = alloc.allocate(3000, 'b');
    expect(b.handle).not.toBe(a.handle);
    const c = alloc.allocate(900, 'c');
    expect(c.handle).toBe(a.handle);
    expect(device.log).toEqual(['allocate 1024', 'allocate 3072']);
  });

  it('reclaims idle blocks for a replay, all or none', () => {
    const device = new FakeDevice(256 * MIB);
    const alloc = allocatorOn(device, false);
    const blocks = [alloc.allocate(1024, 'a'), alloc.allocate(2048, 'b')];
    for (const b of blocks) alloc.free(b);
    expect(alloc.reclaim(blocks)).toBe(true);
    expect(alloc.stats().allocatedBytes).toBe(3072);
    for (const b of blocks) alloc.free(b);
    const taken = alloc.allocate(1024, 'other');
    expect(alloc.reclaim(blocks)).toBe(false);
    alloc.free(taken);
  });
});

describe('ScratchArena', () => {
  it('reuses one buffer per request position across the calls of a batch', () => {
    const device = new FakeDevice(256 * MIB);
    const alloc = allocatorOn(device, false);
    const arena = new ScratchArena<DeviceBlock<number>>({
      acquire: (bytes) => alloc.allocate(bytes, 'scratch'),
      release: (b) => alloc.free(b),
      bytesOf: (b) => b.size,
      reclaim: (blocks) => alloc.reclaim(blocks),
    });
    // A split-K product per call: 100 calls, each with two scratch requests.
    const seen = new Set<DeviceBlock<number>>();
    for (let call = 0; call < 100; call++) {
      arena.beginCall();
      seen.add(arena.take(64 * 1024));
      seen.add(arena.take(call === 50 ? 32 * 1024 : 8 * 1024));
    }
    // Call 50's larger request grew the second position once.
    expect(seen.size).toBe(3);
    expect(arena.bytes).toBe(64 * 1024 + 8 * 1024 + 32 * 1024);
    // A larger request grows its slot; the outgrown buffer stays held for the calls recorded with it.
    arena.beginCall();
    arena.take(128 * 1024);
    expect(arena.items).toHaveLength(4);
    arena.release();
    expect(alloc.stats().allocatedBytes).toBe(0);
    expect(arena.reclaim()).toBe(true);
    arena.clear();
    expect(alloc.stats().allocatedBytes).toBe(0);
  });
});
