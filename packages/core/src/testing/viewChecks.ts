import type { Backend, Tensor } from '../backend.js';
import { DisposedTensorError, InvalidArgumentError, ShapeError } from '../errors.js';
import { kvCacheScatter } from '../kernels/decoding.js';
import { add, scale } from '../kernels/elementwise.js';
import { clipByGlobalNorm } from '../kernels/optimizer.js';
import { backendCheck, type ConformanceCheck } from './backendCheck.js';
import { rejectionOf, thrownBy } from './thrown.js';

class ViewCheckFailure extends Error {
  override name = 'ConformanceFailure';
}

function expect(condition: boolean, message: string): void {
  if (!condition) throw new ViewCheckFailure(message);
}

async function expectValues(tensor: Tensor, want: readonly number[], what: string): Promise<void> {
  const got = Array.from(await tensor.read());
  expect(got.join() === want.join(), `${what}: got [${got.join(', ')}], expected [${want.join(', ')}]`);
}

/** Rejects unless `call` throws (or rejects with) a DisposedTensorError. */
async function expectDisposedError(call: () => unknown, what: string): Promise<void> {
  const caught = await rejectionOf(call);
  expect(
    caught instanceof DisposedTensorError,
    `${what}: expected DisposedTensorError, got ${caught === undefined ? 'success' : String(caught)}`,
  );
}

const range = (n: number, from = 1): number[] => Array.from({ length: n }, (_, i) => from + i);

/**
 * Views (`Tensor.reshape`) on a backend: read, kernel input and output
 * (fresh, preallocated and in place), inside a replayed batch, and the
 * disposal rules.
 */
export function viewChecks(getBackend: () => Promise<Backend>): ConformanceCheck[] {
  const check = backendCheck('views', getBackend);
  return [
    check('a view reads its base’s elements under its own shape, without allocating', async (backend) => {
      using base = backend.upload(range(6), [2, 3]);
      const before = backend.memory();
      using view = base.reshape([3, -1]);
      expect(view.shape.join() === '3,2', `reshape([3, -1]) of [2, 3] has shape [${view.shape.join(', ')}]`);
      expect(view.isView && view.base === base && !base.isView, 'the view does not name its base');
      const after = backend.memory();
      expect(
        after.allocations === before.allocations && after.liveBytes === before.liveBytes,
        `a view allocated: ${JSON.stringify(before)} → ${JSON.stringify(after)}`,
      );
      await expectValues(view, range(6), 'view read');
      using flat = view.reshape([6]);
      expect(flat.base === base, 'a view of a view must have the original base');
    }),
    check('a view is a kernel input and a preallocated, fresh or in-place output', async (backend) => {
      using x = backend.upload(range(12), [2, 6]);
      using xv = x.reshape([3, 4]);
      using y = backend.run(scale, [xv], { alpha: 2 })[0]!;
      expect(y.shape.join() === '3,4', `scale of a [3, 4] view gave [${y.shape.join(', ')}]`);
      await expectValues(
        y,
        range(12).map((v) => 2 * v),
        'kernel on a view',
      );
      using out = backend.zeros([12]);
      using outView = out.reshape([3, 4]);
      const [sum] = backend.run(add, [xv, y], {}, { out: [outView] });
      expect(sum === outView, 'the preallocated view was not returned as the output');
      await expectValues(
        out,
        range(12).map((v) => 3 * v),
        'base of a preallocated output view',
      );
      // In place: the cache [nHeads = 2, maxSeq = 3, headDim = 2] through a flat base.
      using cache = backend.zeros([12]);
      using rows = backend.upload([1, 2, 3, 4], [4]);
      const [written] = backend.run(kvCacheScatter, [cache.reshape([2, 3, 2]), rows], { position: 1 });
      expect(written!.base === cache, 'the in-place output must be the view passed in');
      await expectValues(cache, [0, 0, 1, 2, 0, 0, 0, 0, 3, 4, 0, 0], 'in-place write through a view');
    }),
    check('views work inside a batch and on replay', async (backend) => {
      using a = backend.upload(range(6), [6]);
      const batch = backend.batch();
      const [y] = batch.run(scale, [a.reshape([2, 3])], { alpha: 10 });
      const [z] = batch.run(scale, [y!.reshape([3, 2])], { alpha: 0.5, beta: 1 });
      await batch.submit();
      await expectValues(
        z!,
        range(6).map((v) => 5 * v + 1),
        'batch over views',
      );
      using next = backend.upload(range(6, 11), [6]);
      backend.copy(next, a);
      await batch.submit();
      await expectValues(
        z!,
        range(6, 11).map((v) => 5 * v + 1),
        'replay over views',
      );
      y!.dispose();
      z!.dispose();
    }),
    check('disposing a view frees nothing; disposing its base ends every view of it', async (backend) => {
      const base = backend.upload(range(4), [4]);
      const first = base.reshape([2, 2]);
      const second = base.reshape([1, 4]);
      const batch = backend.batch();
      const [recorded] = batch.run(scale, [second], { alpha: 1 });
      const live = backend.memory();
      first.dispose();
      expect(first.disposed && !base.disposed && !second.disposed, 'disposing a view ended another tensor');
      expect(backend.memory().liveBytes === live.liveBytes, 'disposing a view freed memory');
      await expectValues(base, range(4), 'base after a view was disposed');
      await expectDisposedError(() => first.read(), 'read of a disposed view');
      base.dispose();
      expect(backend.memory().liveBytes < live.liveBytes, 'disposing the base did not free its memory');
      expect(second.disposed, 'a view must count as disposed once its base is');
      await expectDisposedError(() => second.read(), 'read of a view whose base was disposed');
      await expectDisposedError(
        () => backend.run(scale, [second], { alpha: 1 }),
        'kernel on a view whose base was disposed',
      );
      await expectDisposedError(() => second.reshape([4]), 'reshape of a view whose base was disposed');
      await expectDisposedError(() => batch.submit(), 'submit of a batch that recorded such a view');
      recorded!.dispose();
    }),
    check(
      'aliasing: an output over an input’s memory and an in-place input passed again are refused by name; reads may repeat',
      async (backend) => {
        using x = backend.upload(range(6), [2, 3]);
        using y = backend.upload(range(6, 10), [2, 3]);
        const refused = (call: () => unknown, argument: string, what: string) => {
          const caught = thrownBy(call);
          const e = caught as InvalidArgumentError | undefined;
          expect(
            e instanceof InvalidArgumentError && e.argument === argument,
            `${what}: expected an InvalidArgumentError naming '${argument}', got ${caught === undefined ? 'success' : String(caught)}`,
          );
        };
        const before = backend.memory().liveTensors;
        refused(
          () => backend.run(add, [x, y], {}, { out: [x.reshape([6]).reshape([2, 3])] }),
          'out[0]',
          'an output that is a view of an input',
        );
        refused(
          () => backend.run(add, [x.reshape([3, 2]), y.reshape([3, 2])], {}, { out: [y] }),
          'out[0]',
          'an output that is the base of an input view',
        );
        refused(
          () => backend.run(clipByGlobalNorm, [x, x], { maxNorm: 1 }),
          'grads[1]',
          'clipByGlobalNorm([g, g])',
        );
        refused(
          () => backend.run(clipByGlobalNorm, [x, x.reshape([6])], { maxNorm: 1 }),
          'grads[1]',
          'clipByGlobalNorm([g, view of g])',
        );
        expect(backend.memory().liveTensors === before, 'a refused call left tensors behind');
        using doubled = backend.run(add, [x, x])[0]!;
        await expectValues(
          doubled,
          range(6).map((v) => 2 * v),
          'add(x, x)',
        );
      },
    ),
    check('reshape refuses a shape with another number of elements', async (backend) => {
      using base = backend.zeros([2, 3]);
      for (const shape of [
        [4, 2],
        [-1, 4],
        [-1, -1],
        [0, -1],
      ]) {
        const caught = thrownBy(() => base.reshape(shape));
        const e = caught as ShapeError | undefined;
        expect(
          e instanceof ShapeError && e.operation === 'reshape' && e.argument === 'shape',
          `reshape([${shape.join(', ')}]) of [2, 3]: expected a ShapeError naming reshape's 'shape', got ${String(caught)}`,
        );
      }
    }),
  ];
}
