import { InvalidArgumentError } from '@rayo/core';

/** A command line the CLI cannot run: printed with the command's usage, exit status 2. */
export class UsageError extends InvalidArgumentError {}

export function usageError(command: string, flag: string, expected: string, actual: string): never {
  throw new UsageError(`bad ${flag}`, { operation: `rayo ${command}`, argument: flag, expected, actual });
}
