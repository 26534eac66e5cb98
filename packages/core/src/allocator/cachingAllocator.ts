import { OutOfMemoryError } from '../errors.js';
import { AllocatorCounters, type AllocatorStats } from './allocatorStats.js';
import { blockBytes, type PoolName, poolOf, segmentBytes, shouldSplit } from './sizeClasses.js';

/** What the allocator needs of a device: its real allocations (segments). */
export interface DeviceSegments<H> {
  /**
   * A new device allocation of exactly `bytes`; throws an OutOfMemoryError
   * when the device refuses it (other errors pass through untouched).
   */
  allocate(bytes: number, api: string): H;
  /**
   * Frees segments that hold no block in use any more. The backend orders
   * this after the work that used them (a stream synchronize, a deferred
   * destroy).
   */
  release(handles: readonly H[]): void;
  /** Whether an idle segment may be cached; false frees it at once (a buffer the device refused, memory short). */
  cacheable?(handle: H): boolean;
}

export interface CachingAllocatorOptions {
  /**
   * Carve blocks out of larger segments and merge neighbours back when they
   * are freed (possible where a block can be addressed at an offset inside
   * its segment, as a CUDA device pointer can). Without it a block is a
   * whole segment of its size class.
   */
  readonly splitting: boolean;
  /**
   * Idle bytes kept for reuse at most (default: no cap). Beyond it, wholly
   * idle segments are released, largest first; idle parts of segments still
   * in use stay cached until their segment is idle.
   */
  readonly maxCachedBytes?: number;
}

/** A block handed out: `size` bytes at `offset` inside the segment `handle`. */
export interface DeviceBlock<H> {
  readonly handle: H;
  readonly offset: number;
  readonly size: number;
}

class Segment<H> {
  constructor(
    public handle: H,
    readonly size: number,
    readonly pool: PoolName,
  ) {}
}

class Block<H> implements DeviceBlock<H> {
  free = false;
  /** Merged into a neighbour or released with its segment: no longer a block. */
  dead = false;
  prev: Block<H> | undefined;
  next: Block<H> | undefined;
  constructor(
    readonly segment: Segment<H>,
    readonly offset: number,
    public size: number,
    readonly id: number,
  ) {}
  get handle(): H {
    return this.segment.handle;
  }
  /** The block is its whole segment. */
  get whole(): boolean {
    return this.prev === undefined && this.next === undefined;
  }
}

/** Free blocks of one pool ordered by size, then by age: best fit is the first one large enough. */
class FreeBlocks<H> {
  readonly #blocks: Block<H>[] = [];

  get all(): readonly Block<H>[] {
    return this.#blocks;
  }

  #lowerBound(size: number, id: number): number {
    const list = this.#blocks;
    let lo = 0;
    let hi = list.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      const b = list[mid]!;
      if (b.size < size || (b.size === size && b.id < id)) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }

  insert(block: Block<H>): void {
    this.#blocks.splice(this.#lowerBound(block.size, block.id), 0, block);
  }

  remove(block: Block<H>): void {
    const i = this.#lowerBound(block.size, block.id);
    if (this.#blocks[i] === block) this.#blocks.splice(i, 1);
  }

  /** The smallest free block of at least `size` bytes (exactly `size` when `exact`). */
  bestFit(size: number, exact: boolean): Block<H> | undefined {
    const b = this.#blocks[this.#lowerBound(size, -1)];
    return b === undefined || (exact && b.size !== size) ? undefined : b;
  }
}

/**
 * A caching device allocator in the manner of PyTorch's CUDA caching
 * allocator, written once for every backend: requests are rounded to size
 * classes, served from idle blocks (split when much larger, with splitting
 * on), and freed blocks are kept for reuse, merged with idle neighbours.
 * When the device refuses a new segment, every wholly idle segment is
 * released and the allocation is tried once more before an OutOfMemoryError.
 *
 * Reuse is immediate: a backend whose work runs in order on one queue or
 * stream may hand a freed block out again at once, as the next work that
 * uses it is ordered after the work that used it before.
 */
export class CachingAllocator<H> {
  readonly #pools = { small: new FreeBlocks<H>(), large: new FreeBlocks<H>() };
  readonly #counters = new AllocatorCounters();
  readonly #splitting: boolean;
  #maxCachedBytes: number;
  #nextId = 0;

  constructor(
    private readonly device: DeviceSegments<H>,
    options: CachingAllocatorOptions,
  ) {
    this.#splitting = options.splitting;
    this.#maxCachedBytes = options.maxCachedBytes ?? Number.POSITIVE_INFINITY;
  }

  get maxCachedBytes(): number {
    return this.#maxCachedBytes;
  }

  /** Allocated, reserved and peak bytes, retries and refusals so far. */
  stats(): AllocatorStats {
    return this.#counters.snapshot();
  }

  /** The peaks of `stats()` start again from what is in use and held now. */
  resetPeaks(): void {
    this.#counters.resetPeaks();
  }

  /** A block of at least `bytes`; `api` names the call in an OutOfMemoryError. */
  allocate(bytes: number, api: string): DeviceBlock<H> {
    const size = blockBytes(bytes, this.#splitting);
    const pool = this.#splitting ? poolOf(size) : 'large';
    let block = this.#pools[pool].bestFit(size, !this.#splitting);
    if (block) this.#pools[pool].remove(block);
    else block = this.#newSegment(size, pool, api);
    if (this.#splitting && shouldSplit(block.size, size)) {
      const rest = new Block(block.segment, block.offset + size, block.size - size, this.#nextId++);
      rest.prev = block;
      rest.next = block.next;
      if (block.next) block.next.prev = rest;
      block.next = rest;
      block.size = size;
      rest.free = true;
      this.#pools[pool].insert(rest);
    }
    block.free = false;
    this.#counters.allocated(block.size);
    return block;
  }

  /** Gives a block back: kept for reuse (merged with idle neighbours), or released past the cap. */
  free(given: DeviceBlock<H>): void {
    const block = given as Block<H>;
    if (block.free || block.dead) return;
    this.#counters.freed(block.size);
    const pool = this.#pools[block.segment.pool];
    let merged = block;
    for (const neighbour of [block.prev, block.next]) {
      if (!neighbour?.free) continue;
      pool.remove(neighbour);
      merged = this.#merge(merged, neighbour);
    }
    merged.free = true;
    if (merged.whole && this.device.cacheable?.(merged.handle) === false) {
      this.#releaseSegments([merged]);
      return;
    }
    pool.insert(merged);
    if (this.#counters.cachedBytes > this.#maxCachedBytes) this.#trimTo(this.#maxCachedBytes);
  }

  /**
   * Takes these idle blocks back, all or none (a recording replaying the
   * scratch memory it used before): false when one was handed out, merged
   * or released since.
   */
  reclaim(blocks: readonly DeviceBlock<H>[]): boolean {
    const list = blocks as readonly Block<H>[];
    if (!list.every((b) => b.free && !b.dead)) return false;
    for (const b of list) {
      this.#pools[b.segment.pool].remove(b);
      b.free = false;
      this.#counters.allocated(b.size);
    }
    return true;
  }

  /** The device granted a refused segment on a later attempt: the block now lives in `handle`. */
  replaceSegment(block: DeviceBlock<H>, handle: H): void {
    (block as Block<H>).segment.handle = handle;
  }

  /** Releases every wholly idle segment; returns the bytes given back to the device. */
  emptyCache(): number {
    return this.#trimTo(0);
  }

  /** Changes the cap on idle bytes, releasing what is beyond it. */
  setMaxCachedBytes(bytes: number): void {
    this.#maxCachedBytes = bytes;
    if (this.#counters.cachedBytes > bytes) this.#trimTo(bytes);
  }

  #merge(a: Block<H>, b: Block<H>): Block<H> {
    const [first, second] = a.offset < b.offset ? [a, b] : [b, a];
    first.size += second.size;
    first.next = second.next;
    if (second.next) second.next.prev = first;
    second.dead = true;
    return first;
  }

  #newSegment(size: number, pool: PoolName, api: string): Block<H> {
    const preferred = segmentBytes(size, this.#splitting);
    // A smaller segment (just the block) is the fallback when the device cannot give a whole one.
    const sizes = preferred > size ? [preferred, size] : [size];
    const attempt = (): { handle: H; bytes: number } | OutOfMemoryError => {
      let refused: OutOfMemoryError | undefined;
      for (const bytes of sizes) {
        try {
          return { handle: this.device.allocate(bytes, api), bytes };
        } catch (error) {
          if (!(error instanceof OutOfMemoryError)) throw error;
          // The last refusal is of the smallest size: the one worth reporting.
          refused = error;
        }
      }
      return refused!;
    };
    let got = attempt();
    if (got instanceof OutOfMemoryError) {
      // Idle segments are the first thing to give back; then one more try.
      this.#counters.retried();
      this.emptyCache();
      got = attempt();
    }
    if (got instanceof OutOfMemoryError) {
      this.#counters.refused();
      throw this.#outOfMemory(got, size, api);
    }
    this.#counters.reserved(got.bytes);
    const segment = new Segment(got.handle, got.bytes, pool);
    return new Block(segment, 0, got.bytes, this.#nextId++);
  }

  #outOfMemory(cause: OutOfMemoryError, size: number, api: string): OutOfMemoryError {
    const s = this.#counters.snapshot();
    const operation = cause.operation ?? api;
    const expected = cause.expected ?? `${size} bytes free on the device`;
    const actual = cause.actual ?? 'out of memory';
    // The refusal's own words, without the prefix and tail the new error adds again.
    let text = cause.message;
    if (cause.operation && text.startsWith(`${cause.operation}: `))
      text = text.slice(cause.operation.length + 2);
    const tail = ` (expected ${cause.expected ?? '?'}, got ${cause.actual ?? '?'})`;
    if ((cause.expected !== undefined || cause.actual !== undefined) && text.endsWith(tail))
      text = text.slice(0, -tail.length);
    return new OutOfMemoryError(
      `${text}; ${s.allocatedBytes} bytes allocated and ${s.reservedBytes} reserved by this backend after releasing its cache and trying again`,
      { operation, expected, actual, cause },
    );
  }

  /** Releases wholly idle segments, largest first, until at most `limit` idle bytes are cached. */
  #trimTo(limit: number): number {
    const idle = [...this.#pools.small.all, ...this.#pools.large.all]
      .filter((b) => b.whole)
      .sort((a, b) => b.size - a.size);
    const chosen: Block<H>[] = [];
    let cached = this.#counters.cachedBytes;
    for (const b of idle) {
      if (cached <= limit) break;
      chosen.push(b);
      cached -= b.size;
    }
    for (const b of chosen) this.#pools[b.segment.pool].remove(b);
    return this.#releaseSegments(chosen);
  }

  #releaseSegments(blocks: readonly Block<H>[]): number {
    if (blocks.length === 0) return 0;
    let bytes = 0;
    for (const b of blocks) {
      b.dead = true;
      bytes += b.segment.size;
      this.#counters.released(b.segment.size);
    }
    this.device.release(blocks.map((b) => b.handle));
    return bytes;
  }
}
