import { InvalidArgumentError } from '@rayo/core';

/**
 * Checks that option `argument` of `api` is an integer of at least `least`:
 * an `InvalidArgumentError` that says so otherwise.
 */
export function checkIntegerAtLeast(
  api: string,
  argument: string,
  value: number,
  least: number,
  message = `${argument} must be an integer of at least ${least}`,
): void {
  if (!Number.isInteger(value) || value < least) {
    throw new InvalidArgumentError(message, {
      operation: api,
      argument,
      expected: `an integer >= ${least}`,
      actual: String(value),
    });
  }
}
