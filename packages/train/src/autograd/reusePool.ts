import type { DType, Tensor } from '@rayo/core';

function keyOf(dtype: DType, size: number): string {
  return `${dtype}:${size}`;
}

/**
 * Tensors of a tape whose contents are dead (read by no kernel still to be
 * recorded), kept by dtype and element count and handed out again as the
 * preallocated output of a later kernel of the same tape. Kernels run in
 * recording order on one queue or stream, so the later kernel writes only
 * after the earlier readers are done; and the memory is never given back
 * to the allocator before the tape is disposed, so a recorded batch that is
 * replayed finds every tensor it touches alive, at the address it recorded.
 */
export class ReusePool {
  readonly #free = new Map<string, Tensor[]>();
  readonly #members = new Set<Tensor>();

  /** Tensors waiting to be reused. */
  get size(): number {
    return this.#members.size;
  }

  has(tensor: Tensor): boolean {
    return this.#members.has(tensor);
  }

  /** Adds a base tensor whose contents nothing reads any more; adding one twice is a no-op. */
  put(tensor: Tensor): void {
    if (this.#members.has(tensor)) return;
    this.#members.add(tensor);
    const key = keyOf(tensor.dtype, tensor.size);
    const list = this.#free.get(key);
    if (list) list.push(tensor);
    else this.#free.set(key, [tensor]);
  }

  /** A pooled tensor of `dtype` and `size` elements that is not in `avoid`, taken out of the pool. */
  take(dtype: DType, size: number, avoid: readonly (Tensor | undefined)[]): Tensor | undefined {
    const list = this.#free.get(keyOf(dtype, size));
    if (!list) return undefined;
    // The most recently freed first: its memory is the most likely to be in cache.
    for (let i = list.length - 1; i >= 0; i--) {
      const tensor = list[i]!;
      if (avoid.some((t) => t?.base === tensor)) continue;
      list.splice(i, 1);
      this.#members.delete(tensor);
      return tensor;
    }
    return undefined;
  }

  clear(): void {
    this.#free.clear();
    this.#members.clear();
  }
}
