/** What a caching allocator reports: bytes in use and held, their peaks, retries and refusals. */
export interface AllocatorStats {
  /** Bytes of blocks in use (tensors, scratch), in the allocator's size classes. */
  readonly allocatedBytes: number;
  readonly peakAllocatedBytes: number;
  /** Bytes held from the device: blocks in use plus those cached for reuse. */
  readonly reservedBytes: number;
  readonly peakReservedBytes: number;
  /** Device allocations (segments) made so far. */
  readonly segmentsAllocated: number;
  /** Times the device refused an allocation and the cache was released to try again. */
  readonly allocationRetries: number;
  /** OutOfMemoryErrors thrown after that retry failed too. */
  readonly outOfMemoryErrors: number;
}

/** The same figures for a backend without a device cache (the cpu backend): nothing reserved beyond what is in use. */
export function uncachedStats(liveBytes: number, peakBytes: number, allocations: number): AllocatorStats {
  return {
    allocatedBytes: liveBytes,
    peakAllocatedBytes: peakBytes,
    reservedBytes: liveBytes,
    peakReservedBytes: peakBytes,
    segmentsAllocated: allocations,
    allocationRetries: 0,
    outOfMemoryErrors: 0,
  };
}

/** The running counts behind AllocatorStats. */
export class AllocatorCounters {
  #allocated = 0;
  #peakAllocated = 0;
  #reserved = 0;
  #peakReserved = 0;
  #segments = 0;
  #retries = 0;
  #refusals = 0;

  /** Bytes reserved but not in use: what the cache holds. */
  get cachedBytes(): number {
    return this.#reserved - this.#allocated;
  }

  allocated(bytes: number): void {
    this.#allocated += bytes;
    this.#peakAllocated = Math.max(this.#peakAllocated, this.#allocated);
  }

  freed(bytes: number): void {
    this.#allocated -= bytes;
  }

  reserved(bytes: number): void {
    this.#segments++;
    this.#reserved += bytes;
    this.#peakReserved = Math.max(this.#peakReserved, this.#reserved);
  }

  released(bytes: number): void {
    this.#reserved -= bytes;
  }

  /** The peaks start again from what is in use and held now. */
  resetPeaks(): void {
    this.#peakAllocated = this.#allocated;
    this.#peakReserved = this.#reserved;
  }

  retried(): void {
    this.#retries++;
  }

  refused(): void {
    this.#refusals++;
  }

  snapshot(): AllocatorStats {
    return {
      allocatedBytes: this.#allocated,
      peakAllocatedBytes: this.#peakAllocated,
      reservedBytes: this.#reserved,
      peakReservedBytes: this.#peakReserved,
      segmentsAllocated: this.#segments,
      allocationRetries: this.#retries,
      outOfMemoryErrors: this.#refusals,
    };
  }
}
