import { InvalidArgumentError } from '../errors.js';

/** The options of a GPU backend's caching allocator. */
export interface MemoryCacheOptions {
  /**
   * Idle device bytes the backend keeps cached for reuse at most (default:
   * no cap, as PyTorch). Past it, wholly idle allocations are given back to
   * the device. 0 caches nothing that can be given back.
   */
  readonly maxCachedBytes?: number;
}

/** The cap on cached bytes the options ask for, checked: a non-negative number (Infinity allowed). */
export function resolveMaxCachedBytes(backend: string, options: MemoryCacheOptions): number {
  const value = options.maxCachedBytes;
  if (value === undefined) return Number.POSITIVE_INFINITY;
  if (typeof value !== 'number' || Number.isNaN(value) || value < 0) {
    throw new InvalidArgumentError('maxCachedBytes must be a non-negative number of bytes', {
      operation: `${backend} backend options`,
      argument: 'maxCachedBytes',
      expected: 'a number >= 0 (Infinity: no cap)',
      actual: String(value),
    });
  }
  return value;
}
