/** Where a scratch arena gets its memory: a backend's allocator, seen through its own buffer type. */
export interface ScratchSource<T> {
  acquire(bytes: number): T;
  release(item: T): void;
  /** Usable bytes of an item (at least what was asked). */
  bytesOf(item: T): number;
  /** Takes released items back, all or none, for a replay that uses them again. */
  reclaim?(items: readonly T[]): boolean;
}

/**
 * The scratch memory of one recorded batch (or one eager call), reused by
 * its calls in order. Work of a batch runs in order on one queue or stream,
 * and a call's scratch is dead once the call is done, so the k-th scratch
 * request of every call can share one buffer: the arena holds, per request
 * position, the largest buffer asked for so far, instead of one buffer per
 * request of every call. A buffer outgrown by a later call stays held too,
 * as earlier calls were recorded with it.
 */
export class ScratchArena<T> {
  readonly #slots: T[] = [];
  readonly #held: T[] = [];
  #next = 0;

  constructor(private readonly source: ScratchSource<T>) {}

  /** Items held, in the order they were acquired. */
  get items(): readonly T[] {
    return this.#held;
  }

  /** Bytes held. */
  get bytes(): number {
    return this.#held.reduce((sum, item) => sum + this.source.bytesOf(item), 0);
  }

  /** A new call starts: its scratch requests reuse the buffers of the calls before it. */
  beginCall(): void {
    this.#next = 0;
  }

  /** Scratch of at least `bytes` for the call being recorded. */
  take(bytes: number): T {
    const slot = this.#next++;
    const current = this.#slots[slot];
    if (current !== undefined && this.source.bytesOf(current) >= bytes) return current;
    const item = this.source.acquire(bytes);
    this.#slots[slot] = item;
    this.#held.push(item);
    return item;
  }

  /** Gives every item back to its source; the arena keeps them listed for `reclaim`. */
  release(): void {
    for (const item of this.#held) this.source.release(item);
  }

  /** Takes the released items back for a replay; false if one was handed out since. */
  reclaim(): boolean {
    if (this.#held.length === 0) return true;
    return this.source.reclaim?.(this.#held) ?? false;
  }

  /** Gives every item back and forgets them. */
  clear(): void {
    this.release();
    this.#held.length = 0;
    this.#slots.length = 0;
    this.#next = 0;
  }
}
