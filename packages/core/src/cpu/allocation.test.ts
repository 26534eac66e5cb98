import { describe, expect, it } from 'vitest';
import { OutOfMemoryError } from '../errors.js';
import { CpuBackend } from './backend.js';

describe('cpu allocations', () => {
  it('refuses a tensor beyond maxBufferBytes with an OutOfMemoryError naming the call and the size', () => {
    const backend = new CpuBackend();
    const error = (() => {
      try {
        backend.empty([2 ** 33]);
      } catch (e) {
        return e;
      }
    })();
    expect(error).toBeInstanceOf(OutOfMemoryError);
    expect((error as OutOfMemoryError).operation).toBe('empty');
    expect((error as OutOfMemoryError).actual).toBe('34359738368 bytes for f32[8589934592]');
    expect(() => backend.zeros([2 ** 20, 2 ** 13], 'i32')).toThrow(OutOfMemoryError);
    expect(backend.memory().liveTensors).toBe(0);
  });

  it("reports memory() in the allocator's shape, reserving nothing beyond what tensors hold", () => {
    const backend = new CpuBackend();
    const a = backend.zeros([10]);
    const b = backend.zeros([6], 'i32');
    a.dispose();
    backend.emptyCache();
    expect(backend.memory()).toEqual({
      liveTensors: 1,
      liveBytes: 24,
      peakBytes: 64,
      allocations: 2,
      allocatedBytes: 24,
      peakAllocatedBytes: 64,
      reservedBytes: 24,
      peakReservedBytes: 64,
      segmentsAllocated: 2,
      allocationRetries: 0,
      outOfMemoryErrors: 0,
    });
    b.dispose();
    backend.dispose();
    // Nothing to give back, before or after dispose.
    backend.emptyCache();
  });

  it('starts the peaks of memory() again from what is live at resetPeakMemory()', () => {
    const backend = new CpuBackend();
    const kept = backend.zeros([3]);
    backend.zeros([40]).dispose();
    expect(backend.memory().peakAllocatedBytes).toBe(172);
    backend.resetPeakMemory();
    expect(backend.memory()).toMatchObject({ peakBytes: 12, peakAllocatedBytes: 12, peakReservedBytes: 12 });
    backend.zeros([5]).dispose();
    expect(backend.memory()).toMatchObject({ peakBytes: 32, peakAllocatedBytes: 32, peakReservedBytes: 32 });
    kept.dispose();
    backend.dispose();
  });
});
