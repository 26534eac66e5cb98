/**
 * The size bucket of a pooled device allocation: requests are rounded up so
 * that allocations of similar sizes can be reused. 256-byte steps up to
 * 64 KiB (256 is also CUDA's allocation alignment and a multiple of WebGPU's
 * storage offset alignment), then eight buckets per power of two (at most
 * 12.5% slack). A request of 0 bytes takes the smallest bucket.
 */
export function poolBucketBytes(bytes: number): number {
  const b = Math.max(bytes, 1);
  if (b <= 64 * 1024) return Math.ceil(b / 256) * 256;
  const step = 2 ** (Math.floor(Math.log2(b)) - 3);
  return Math.ceil(b / step) * step;
}

/**
 * Idle device buffers by size bucket (`poolBucketBytes`): what a backend's
 * pool keeps between a release and the next request of that bucket. The
 * pool only keeps them; creating and destroying buffers is the backend's.
 */
export class SizeBuckets<B> {
  readonly #free = new Map<number, B[]>();
  #pooledBytes = 0;

  /** Bytes of the buffers kept here. */
  get pooledBytes(): number {
    return this.#pooledBytes;
  }

  /** An idle buffer of the bucket `size` (a `poolBucketBytes` value), if one is kept. */
  take(size: number): B | undefined {
    const buffer = this.#free.get(size)?.pop();
    if (buffer !== undefined) this.#pooledBytes -= size;
    return buffer;
  }

  /** Keeps `buffer`, whose bucket is `size`, for a later request. */
  put(buffer: B, size: number): void {
    let list = this.#free.get(size);
    if (!list) {
      list = [];
      this.#free.set(size, list);
    }
    list.push(buffer);
    this.#pooledBytes += size;
  }

  /** Whether `buffer` (of bucket `size`) is kept here, idle. */
  has(buffer: B, size: number): boolean {
    return this.#free.get(size)?.includes(buffer) ?? false;
  }

  /** Takes a kept `buffer` (of bucket `size`) out again; false if it is not here. */
  remove(buffer: B, size: number): boolean {
    const list = this.#free.get(size);
    const i = list?.indexOf(buffer) ?? -1;
    if (i < 0) return false;
    list!.splice(i, 1);
    this.#pooledBytes -= size;
    return true;
  }

  /** Empties the pool and returns what it kept, for the backend to destroy. */
  drain(): B[] {
    const all = [...this.#free.values()].flat();
    this.#free.clear();
    this.#pooledBytes = 0;
    return all;
  }
}
