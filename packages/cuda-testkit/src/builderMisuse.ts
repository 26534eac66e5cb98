import { InvalidArgumentError } from '@rayo/core';
import { type KernelBuilder, PtxModule, type PtxModuleOptions } from '@rayo/cuda-ptx';
import { expect } from 'vitest';

/** Runs `body` in an entry `k` of a fresh module and returns the InvalidArgumentError it threw. */
export function builderError(
  body: (k: KernelBuilder) => void,
  options: PtxModuleOptions = {},
): InvalidArgumentError {
  try {
    new PtxModule(options).entry('k', {}, (k) => body(k));
  } catch (e) {
    expect(e).toBeInstanceOf(InvalidArgumentError);
    return e as InvalidArgumentError;
  }
  throw new Error('expected the builder to throw');
}
