import { OutOfMemoryError, RayoError } from '@rayo/core';
import type { GPUDevice, GPUError } from './webgpuTypes.js';

/** A WebGPU error and the call whose work raised it (undefined: raised outside any call). */
export interface AttributedError {
  readonly error: GPUError;
  readonly call: string | undefined;
}

// Calls whose errors nobody reads (no sync, no read) must not grow the list without bound.
const MAX_KEPT_ERRORS = 64;

/**
 * WebGPU reports validation and out-of-memory errors asynchronously, so they
 * cannot be thrown by the call that caused them. Each call's encoding and
 * submission runs inside error scopes of its own; what they catch is kept with
 * the call's name and number, for the next sync, read or batch submit to throw.
 */
export class CallErrors {
  /** Calls since the last sync: the number that names a call in errors. */
  #calls = 0;
  readonly #pending = new Set<Promise<void>>();
  readonly #errors: AttributedError[] = [];

  constructor(private readonly device: GPUDevice) {}

  /**
   * Runs `work` (one call's encoding and submission) inside validation and
   * out-of-memory scopes. `call` names it: a kernel name, or a function that
   * makes the name only when an error needs it.
   */
  scoped<T>(call: string | (() => string), work: () => T): T {
    const number = ++this.#calls;
    const device = this.device;
    device.pushErrorScope('out-of-memory');
    device.pushErrorScope('validation');
    try {
      return work();
    } finally {
      const validation = device.popErrorScope();
      const outOfMemory = device.popErrorScope();
      const settled = Promise.all([validation, outOfMemory]).then(
        (errors) => {
          for (const error of errors) if (error) this.#keep(error, call, number);
        },
        // Scopes of a lost device reject; the loss itself is what gets reported.
        () => {},
      );
      this.#pending.add(settled);
      void settled.then(() => this.#pending.delete(settled));
    }
  }

  #keep(error: GPUError, call: string | (() => string), number: number): void {
    if (this.#errors.length >= MAX_KEPT_ERRORS) return;
    const name = typeof call === 'string' ? call : call();
    this.#errors.push({ error, call: `${name} (call ${number} since the last sync)` });
  }

  /** A sync starts: the calls after it are numbered from 1 again. */
  restartCount(): void {
    this.#calls = 0;
  }

  /** Every error of the calls scoped so far, once their scopes have settled; each is returned once. */
  async take(): Promise<AttributedError[]> {
    if (this.#pending.size > 0) await Promise.all(this.#pending);
    return this.#errors.splice(0);
  }
}

/** The RayoError for errors WebGPU reported: each names the call that caused it, where one did. */
export function reportedError(api: string, errors: readonly AttributedError[]): RayoError {
  const message = errors
    .map(({ error, call }) => (call === undefined ? error.message : `${call}: ${error.message}`))
    .join('\n');
  const details = { operation: api, cause: errors[0]?.error };
  const outOfMemory = errors.some(({ error }) => error.constructor.name === 'GPUOutOfMemoryError');
  return outOfMemory
    ? new OutOfMemoryError(`the device ran out of memory: ${message}`, details)
    : new RayoError(`WebGPU reported ${errors.length} error(s): ${message}`, details);
}
