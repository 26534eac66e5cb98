import type { MemoryStats } from '../backend.js';

/** The tensor counts of MemoryStats (the allocator's figures are its own). */
export type LiveTensorStats = Pick<MemoryStats, 'liveTensors' | 'liveBytes' | 'peakBytes' | 'allocations'>;

/** The live and peak byte counts behind `Backend.memory()`. */
export class LiveStats {
  #liveTensors = 0;
  #liveBytes = 0;
  #peakBytes = 0;
  #allocations = 0;

  allocated(bytes: number): void {
    this.#liveTensors++;
    this.#allocations++;
    this.#liveBytes += bytes;
    this.#peakBytes = Math.max(this.#peakBytes, this.#liveBytes);
  }

  freed(bytes: number): void {
    this.#liveTensors--;
    this.#liveBytes -= bytes;
  }

  /** The peak starts again from the bytes live now. */
  resetPeak(): void {
    this.#peakBytes = this.#liveBytes;
  }

  snapshot(): LiveTensorStats {
    return {
      liveTensors: this.#liveTensors,
      liveBytes: this.#liveBytes,
      peakBytes: this.#peakBytes,
      allocations: this.#allocations,
    };
  }
}
