import type { Backend } from '../backend.js';
import { OutOfMemoryError, type RayoError, UnsubmittedWriteError } from '../errors.js';
import { add, relu } from '../kernels/elementwise.js';
import { backendCheck, type ConformanceCheck } from './backendCheck.js';

class ContractFailure extends Error {
  override name = 'ContractFailure';
}

function fail(message: string): never {
  throw new ContractFailure(message);
}

/** The error `work` throws or rejects with; fails the check if it succeeds. */
async function errorOf(what: string, work: () => unknown): Promise<unknown> {
  try {
    await work();
  } catch (error) {
    return error;
  }
  fail(`${what} succeeded; it must be refused`);
}

function expectError(
  what: string,
  error: unknown,
  errorClass: typeof RayoError,
  operation: string,
  argument?: string,
): void {
  if (!(error instanceof errorClass)) {
    fail(`${what}: expected ${errorClass.name}, got ${(error as Error)?.name}: ${(error as Error)?.message}`);
  }
  const e = error as RayoError;
  if (e.operation !== operation)
    fail(`${what}: the error names '${e.operation}', expected '${operation}': ${e.message}`);
  if (argument !== undefined && e.argument !== argument) {
    fail(`${what}: the error names argument '${e.argument}', expected '${argument}': ${e.message}`);
  }
}

function sameValues(a: ArrayLike<number>, b: ArrayLike<number>): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (!Object.is(a[i], b[i])) return false;
  return true;
}

const ramp = (n: number, from: number) => Float32Array.from({ length: n }, (_, i) => from + i);

/**
 * The memory contract every backend keeps under faults:
 * - an output of a kernel recorded in a batch holds no data until the batch
 *   is submitted: reading it, or using it outside that batch, throws
 *   UnsubmittedWriteError (never another tensor's bytes, never zeros
 *   presented as a result);
 * - `zeros` reads zeros; `empty` is unspecified until written, but never shows
 *   the data of another live tensor;
 * - an allocation the device cannot make is an OutOfMemoryError at the
 *   allocating call or at the latest at the next read or sync, and the backend
 *   works again once memory is freed.
 */
export function faultContractChecks(getBackend: () => Promise<Backend>): ConformanceCheck[] {
  const check = backendCheck('contract', getBackend);
  return [
    check('an output of an unsubmitted batch cannot be read or used eagerly', async (backend) => {
      // A freed tensor first, so that a pooling backend has stale bytes to hand out.
      backend.upload(ramp(6, 1), [6]).dispose();
      using x = backend.upload([-1, 2, -3, 4, -5, 6], [6]);
      const batch = backend.batch();
      using y = batch.run(relu, [x])[0]!;
      expectError(
        'read before submit',
        await errorOf('read before submit', () => y.read()),
        UnsubmittedWriteError,
        'read',
        'tensor',
      );
      expectError(
        'an eager kernel on it',
        await errorOf('an eager kernel on it', () => backend.run(add, [y, x])),
        UnsubmittedWriteError,
        'add',
        'a',
      );
      await batch.submit();
      const values = Array.from(await y.read());
      if (values.join() !== '0,2,0,4,0,6') fail(`after submit: read ${values.join()}, expected 0,2,0,4,0,6`);
    }),
    check('a batch refuses to submit an input that an unsubmitted batch writes', async (backend) => {
      using x = backend.upload([-1, 2, -3, 4], [4]);
      const first = backend.batch();
      using y = first.run(relu, [x])[0]!;
      const second = backend.batch();
      using z = second.run(add, [y, x])[0]!;
      expectError(
        'submit before the writer',
        await errorOf('submit before the writer', () => second.submit()),
        UnsubmittedWriteError,
        'add',
        'a',
      );
      await first.submit();
      await second.submit();
      const values = Array.from(await z.read());
      if (values.join() !== '-1,4,-3,8')
        fail(`after both submits: read ${values.join()}, expected -1,4,-3,8`);
    }),
    check('a fresh tensor never shows the data of another live tensor', async (backend) => {
      const n = 4096;
      using live = backend.upload(ramp(n, 1), [n]);
      // A freed tensor's bytes may show (unspecified contents); a live one's may not.
      backend.upload(ramp(n, -n), [n]).dispose();
      using fresh = backend.empty([n]);
      using zero = backend.zeros([n]);
      await backend.sync();
      const liveValues = await live.read();
      if (sameValues(await fresh.read(), liveValues)) fail('empty() read back the data of a live tensor');
      if ((await zero.read()).some((v) => v !== 0)) fail('zeros() read back non-zero values');
    }),
    check(
      'an allocation beyond the device is an OutOfMemoryError and the backend recovers',
      async (backend) => {
        const tooBig = Math.floor(backend.info.limits.maxBufferBytes / 4) + 1;
        const error = await errorOf(`empty([${tooBig}])`, async () => {
          const t = backend.empty([tooBig]);
          try {
            await backend.sync();
          } finally {
            t.dispose();
          }
        });
        expectError(`empty([${tooBig}])`, error, OutOfMemoryError, 'empty');
        using x = backend.upload([-2, 3], [2]);
        using y = backend.run(relu, [x])[0]!;
        const values = Array.from(await y.read());
        if (values.join() !== '0,3')
          fail(`after the failed allocation: relu read ${values.join()}, expected 0,3`);
      },
    ),
  ];
}
