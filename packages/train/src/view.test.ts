import { createCpuBackend, ShapeError, scale } from '@rayo/core';
import { describe, expect, it } from 'vitest';
import { baseOf, isView, reshapeView } from './view.js';

describe('reshapeView', () => {
  it('shares memory under a new shape without allocating', async () => {
    const backend = createCpuBackend();
    const base = backend.upload([1, 2, 3, 4, 5, 6], [2, 3]);
    const before = backend.memory();
    const view = reshapeView(base, [3, 2]);
    expect(view.shape).toEqual([3, 2]);
    expect(isView(view)).toBe(true);
    expect(baseOf(view)).toBe(base);
    expect(backend.memory().allocations).toBe(before.allocations);
    expect(Array.from(await view.read())).toEqual([1, 2, 3, 4, 5, 6]);
    // Kernels see the view's shape.
    const [y] = backend.run(scale, [view], { alpha: 2 });
    expect(y!.shape).toEqual([3, 2]);
    expect(Array.from(await y!.read())).toEqual([2, 4, 6, 8, 10, 12]);
    y!.dispose();
  });

  it('disposing a view frees nothing; a view of a view points at the owner', async () => {
    const backend = createCpuBackend();
    const base = backend.upload([1, 2, 3, 4], [4]);
    const live = backend.memory().liveTensors;
    const view = reshapeView(reshapeView(base, [2, 2]), [1, 4]);
    expect(baseOf(view)).toBe(base);
    view.dispose();
    expect(view.disposed).toBe(true);
    expect(base.disposed).toBe(false);
    expect(backend.memory().liveTensors).toBe(live);
    expect(Array.from(await base.read())).toEqual([1, 2, 3, 4]);
    base.dispose();
    expect(backend.memory().liveTensors).toBe(live - 1);
  });

  it('refuses a shape of another size', () => {
    const backend = createCpuBackend();
    const base = backend.zeros([2, 3]);
    expect(() => reshapeView(base, [4, 2])).toThrow(ShapeError);
    expect(() => reshapeView(base, [4, 2])).toThrow(/expected a shape of 6 elements/);
  });
});
