import { InvalidArgumentError } from '@rayo/core';

/** How far a model load is: tensors and their stored bytes uploaded so far, of all that will be. */
export interface LoadProgress {
  readonly tensorsLoaded: number;
  readonly tensorsTotal: number;
  readonly bytesLoaded: number;
  readonly bytesTotal: number;
}

/** The `onProgress` option of the loaders: called once with nothing loaded, then after each tensor is uploaded. */
export type LoadProgressCallback = (progress: LoadProgress) => void;

/**
 * Counts uploads against the tensors (and their stored bytes, as the file
 * holds them) a load will make, and reports each to `onProgress`.
 */
export class LoadProgressCounter {
  readonly #onProgress: LoadProgressCallback | undefined;
  readonly #tensorsTotal: number;
  readonly #bytesTotal: number;
  #tensorsLoaded = 0;
  #bytesLoaded = 0;

  constructor(onProgress: LoadProgressCallback | undefined, storedBytes: readonly number[]) {
    if (onProgress !== undefined && typeof onProgress !== 'function') {
      throw new InvalidArgumentError('onProgress must be a function', {
        operation: 'loadProgress',
        argument: 'onProgress',
        expected: 'a function (progress: LoadProgress) => void, or absent',
        actual: typeof onProgress,
      });
    }
    this.#onProgress = onProgress;
    this.#tensorsTotal = storedBytes.length;
    this.#bytesTotal = storedBytes.reduce((sum, n) => sum + n, 0);
    // Nothing loaded yet: a progress bar can show the totals before the first tensor (which may take seconds).
    this.#report();
  }

  #report(): void {
    this.#onProgress?.({
      tensorsLoaded: this.#tensorsLoaded,
      tensorsTotal: this.#tensorsTotal,
      bytesLoaded: this.#bytesLoaded,
      bytesTotal: this.#bytesTotal,
    });
  }

  /** One more tensor of `bytes` stored bytes is on the device. */
  uploaded(bytes: number): void {
    this.#tensorsLoaded++;
    this.#bytesLoaded += bytes;
    this.#report();
  }
}
