import type { Backend } from '../backend.js';
import type { DType } from '../dtype.js';
import { InvalidArgumentError } from '../errors.js';
import { backendCheck, type ConformanceCheck } from './backendCheck.js';
import { expectRayoError, fail } from './expect.js';

/** Numbers an i32 or u32 tensor cannot hold are refused by `upload` and `write`, never wrapped. */
export function integerDataChecks(getBackend: () => Promise<Backend>): ConformanceCheck[] {
  const check = backendCheck('api', getBackend);
  return [
    check('integer uploads and writes refuse values their dtype cannot hold', async (backend) => {
      const bad: readonly (readonly [DType, number])[] = [
        ['i32', 2 ** 31],
        ['i32', -(2 ** 31) - 1],
        ['i32', 1.5],
        ['i32', Number.NaN],
        ['u32', -1],
        ['u32', 2 ** 32],
      ];
      for (const [dtype, value] of bad) {
        expectRayoError(
          () => backend.upload([1, value, 3], [3], dtype),
          InvalidArgumentError,
          'upload',
          'data',
        );
        using t = backend.upload([1, 2, 3], [3], dtype);
        expectRayoError(() => backend.write(t, [value, 2, 3]), InvalidArgumentError, 'write', 'data');
      }
      using edges = backend.upload([-(2 ** 31), 2 ** 31 - 1], [2], 'i32');
      const read = await edges.read();
      if (read[0] !== -(2 ** 31) || read[1] !== 2 ** 31 - 1) fail(`i32 range edges read back as ${read}`);
    }),
  ];
}
