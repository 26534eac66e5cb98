import { describe, expect, it } from 'vitest';
import type { Tensor } from './backend.js';
import { collectiveChecks, SingleRankCommunicator } from './communicator.js';
import { createCpuBackend } from './cpu/backend.js';
import { DisposedTensorError, InvalidArgumentError } from './errors.js';
import { add } from './kernels/elementwise.js';
import { copyRows } from './kernels/memory.js';
import { multiTensorAdamw } from './kernels/optimizer.js';

describe('Tensor.slice', () => {
  it('is a 1-d view of a range of the base: reads, kernel outputs and copies go to the base', async () => {
    const backend = createCpuBackend();
    const flat = backend.upload([1, 2, 3, 4, 5, 6, 7, 8], [2, 4]);
    const middle = flat.slice(2, 4);
    expect(middle.shape).toEqual([4]);
    expect([middle.isView, middle.base === flat]).toEqual([true, true]);
    expect(Array.from(await middle.read())).toEqual([3, 4, 5, 6]);
    // A kernel writes into the slice (reshaped), a copy into a slice of the slice.
    const a = backend.upload([10, 20, 30, 40], [2, 2]);
    backend.run(add, [a, a], {}, { out: [middle.reshape([2, 2])] });
    backend.copy(backend.upload([-1], [1]), middle.slice(3, 1));
    expect(Array.from(await flat.read())).toEqual([1, 2, 20, 40, 60, -1, 7, 8]);
    expect(Array.from(await flat.slice(8, 0).read())).toEqual([]);
    backend.dispose();
  });

  it('refuses ranges outside the tensor and ends with its base', async () => {
    const backend = createCpuBackend();
    const flat = backend.zeros([6]);
    for (const [offset, length] of [
      [-1, 2],
      [7, 0],
      [2, 5],
      [1.5, 1],
    ] as const) {
      expect(() => flat.slice(offset, length)).toThrow(InvalidArgumentError);
    }
    expect(() => flat.slice(2, 5)).toThrow(/length.*\[0, 4\].*5|expected an integer in \[0, 4\]/s);
    const view = flat.slice(1, 2);
    flat.dispose();
    expect(view.disposed).toBe(true);
    await expect(async () => view.read()).rejects.toThrow(DisposedTensorError);
    expect(() => flat.slice(0, 1)).toThrow(DisposedTensorError);
    backend.dispose();
  });

  it('lets an in-place kernel take disjoint slices of one base, and refuses overlapping ones', async () => {
    const backend = createCpuBackend();
    const flat = backend.upload([1, 2, 3, 4, 5, 6, 7, 8], [8]);
    const [low, high] = [flat.slice(0, 4).reshape([2, 2]), flat.slice(4, 4).reshape([2, 2])];
    expect([low.overlaps(high), low.overlaps(flat), flat.slice(3, 2).overlaps(high)]).toEqual([
      false,
      true,
      true,
    ]);
    // copyRows writes y in place: its rows from x, a disjoint slice of the same memory.
    backend.run(copyRows, [low, high.slice(2, 2).reshape([1, 2])], { row: 0 });
    expect(Array.from(await flat.read())).toEqual([7, 8, 3, 4, 5, 6, 7, 8]);
    expect(() => backend.run(copyRows, [low, flat.slice(2, 2).reshape([1, 2])], { row: 1 })).toThrow(
      /written in place is also passed as another input/,
    );
    backend.dispose();
  });

  it('names the first input over memory another one writes in place, among many (an optimizer’s)', () => {
    const backend = createCpuBackend();
    // Slots of (param, grad, m, v): params, m and v are written in place.
    const slots = Array.from({ length: 40 }, () => Array.from({ length: 4 }, () => backend.zeros([6])));
    const run = (tensors: Tensor[]) =>
      backend.run(multiTensorAdamw, [undefined, undefined, undefined, undefined, ...tensors], {
        lr: 1e-3,
        step: 1,
      });
    expect(() => run(slots.flat())).not.toThrow();
    // Slot 30's gradient is slot 7's m; then slot 12's v is a view of slot 3's param.
    const shared = slots.map((slot) => [...slot]);
    shared[30]![1] = shared[7]![2]!;
    const error = (() => {
      try {
        run(shared.flat());
      } catch (e) {
        return e as InvalidArgumentError;
      }
    })();
    expect(error?.message).toMatch(/written in place is also passed as another input/);
    expect(error?.argument).toBe('tensors[121]');
    const viewed = slots.map((slot) => [...slot]);
    viewed[12]![3] = viewed[3]![0]!.slice(0, 6);
    expect(() => run(viewed.flat())).toThrow(/written in place is also passed as another input/);
    backend.dispose();
  });

  it('lets a collective run in place: the per-rank tensor exactly this rank’s block of the whole', async () => {
    const backend = createCpuBackend();
    const whole = backend.upload([1, 2, 3, 4], [4]);
    expect(collectiveChecks.inPlace('allGather', whole.slice(0, 2), whole, 0)).toBe(true);
    expect(collectiveChecks.inPlace('allGather', whole.slice(2, 2), whole, 1)).toBe(true);
    expect(collectiveChecks.inPlace('allGather', backend.zeros([2]), whole, 1)).toBe(false);
    expect(() => collectiveChecks.inPlace('allGather', whole.slice(2, 2), whole, 0)).toThrow(
      /other than as its own block.*rank 0's block/s,
    );
    const one = new SingleRankCommunicator(backend);
    one.allGather(whole.slice(0, 4), whole);
    one.reduceScatter(whole, whole.slice(0, 4));
    expect(Array.from(await whole.read())).toEqual([1, 2, 3, 4]);
    expect(() => one.allGather(whole.slice(1, 2), backend.zeros([2]))).not.toThrow();
    backend.dispose();
  });
});
