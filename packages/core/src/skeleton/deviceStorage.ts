import type { TensorStorage } from '../backend.js';

/**
 * The memory behind a tensor of a skeleton backend: the backend's buffer
 * (a typed array, a GPUBuffer, a device allocation) and the byte range the
 * tensor covers in it. `onFree` runs once; it is absent for memory the
 * tensor borrows (an imported buffer, a view of a weight).
 */
export class DeviceStorage<B> implements TensorStorage {
  #freed = false;

  constructor(
    /** Replaced only when the device grants a refused allocation on a retry, before anything used it. */
    public buffer: B,
    readonly byteLength: number,
    readonly offset: number,
    private readonly onFree: ((storage: DeviceStorage<B>) => void) | undefined,
  ) {}

  free(): void {
    if (this.#freed) return;
    this.#freed = true;
    this.onFree?.(this);
  }
}
