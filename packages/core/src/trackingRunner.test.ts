import { describe, expect, it } from 'vitest';
import { createCpuBackend } from './cpu/backend.js';
import { kvCacheScatter } from './kernels/decoding.js';
import { add, scale } from './kernels/elementwise.js';
import { copy, fill } from './kernels/memory.js';
import { type TrackedCall, TrackingRunner } from './trackingRunner.js';

describe('TrackingRunner', () => {
  it('tracks what kernels allocate, not inputs written in place nor preallocated outputs', async () => {
    const backend = createCpuBackend();
    const a = backend.upload([1, 2], [2]);
    const cache = backend.zeros([1, 2, 2]);
    const out = backend.zeros([2]);
    const runner = new TrackingRunner(backend);
    const sum = runner.run1(add, [a, a]);
    expect(runner.run(kvCacheScatter, [cache, backend.upload([5, 6], [1, 2])], { position: 1 })).toEqual([
      cache,
    ]);
    expect(runner.run1(copy, [sum], {}, { out: [out] })).toBe(out);
    runner.run(fill, [out], { value: 3 });
    expect(runner.size).toBe(1);
    expect(runner.has(sum)).toBe(true);
    expect(Array.from(await sum.read())).toEqual([2, 4]);
    expect(Array.from(await out.read())).toEqual([3, 3]);
    runner.dispose();
    expect(sum.disposed).toBe(true);
    expect(cache.disposed || out.disposed || a.disposed).toBe(false);
    expect(runner.size).toBe(0);
  });

  it('keeps, releases and frees all but a survivor', () => {
    const backend = createCpuBackend();
    const a = backend.upload([1], [1]);
    const runner = new TrackingRunner(backend);
    const [x, y, z] = [1, 2, 3].map((s) => runner.run1(scale, [a], { alpha: s }));
    const uploaded = runner.adopt(backend.upload([0], [1]));
    expect(runner.keep(x!)).toBe(x);
    runner.disposeAllBut(z!);
    expect([x!.disposed, y!.disposed, z!.disposed, uploaded.disposed]).toEqual([false, true, false, true]);
    expect(runner.release()).toEqual([z]);
    expect(runner.size).toBe(0);
    x!.dispose();
    z!.dispose();
  });

  it('reports every call, and sends later kernels where it is redirected', async () => {
    const backend = createCpuBackend();
    const calls: TrackedCall[] = [];
    const runner = new TrackingRunner(backend, { onRun: (call) => calls.push(call) });
    const a = backend.upload([1, 2], [2]);
    const b = runner.run1(scale, [a], { alpha: 2 });
    const batch = backend.batch();
    runner.redirect(batch);
    expect(runner.inner).toBe(batch);
    const c = runner.run1(add, [a, b]);
    expect(batch.size).toBe(1);
    await batch.submit();
    expect(Array.from(await c.read())).toEqual([3, 6]);
    expect(calls.map((call) => [call.spec.name, call.inputs, call.attrs, call.outputs])).toEqual([
      ['scale', [a], { alpha: 2 }, [b]],
      ['add', [a, b], undefined, [c]],
    ]);
    expect(runner.size).toBe(2);
    runner.dispose();
  });
});
