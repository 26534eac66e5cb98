import type { RayoError } from '../errors.js';
import { thrownBy } from './thrown.js';

/** A conformance check that did not hold. */
export class CheckFailure extends Error {
  override name = 'ConformanceFailure';
}

export function fail(message: string): never {
  throw new CheckFailure(message);
}

export type ErrorClass = abstract new (...args: never[]) => RayoError;

/** `call` must throw a RayoError of `errorClass` naming `kernel` and `argument`, with expected vs actual. */
export function expectRayoError(
  call: () => unknown,
  errorClass: ErrorClass,
  kernel: string,
  argument: string,
): void {
  const caught = thrownBy(call);
  if (caught === undefined) fail(`expected ${errorClass.name} naming '${argument}', but the call succeeded`);
  if (!(caught instanceof errorClass)) {
    fail(
      `expected ${errorClass.name}, got ${(caught as Error)?.name ?? typeof caught}: ${(caught as Error)?.message ?? caught}`,
    );
  }
  const e = caught as RayoError;
  if (e.operation !== kernel) fail(`error names kernel '${e.operation}', expected '${kernel}': ${e.message}`);
  if (e.argument !== argument)
    fail(`error names argument '${e.argument}', expected '${argument}': ${e.message}`);
  if (e.expected === undefined || e.actual === undefined)
    fail(`error does not say expected vs actual: ${e.message}`);
  if (!e.message.includes(e.expected) || !e.message.includes(e.actual)) {
    fail(`message does not carry expected (${e.expected}) and actual (${e.actual}): ${e.message}`);
  }
}
