import type { DType, HostArray } from './dtype.js';
import type { AttrValues, KernelSpec } from './kernel.js';
import type { Shape } from './shape.js';
import type { Tensor } from './tensor.js';

/**
 * Limits every backend means the same way. Limits of one backend's API (such
 * as WebGPU's storage binding size) are that backend's own properties.
 */
export interface BackendLimits {
  /** Largest single allocation, in bytes. */
  readonly maxBufferBytes: number;
}

export interface BackendInfo {
  /** Registry name: `cpu`, `wgpu`, `cuda`. */
  readonly name: string;
  /** Human-readable device, e.g. `NVIDIA H200` or `JavaScript (Node 20.20.2)`. */
  readonly device: string;
  readonly kind: 'cpu' | 'gpu';
  readonly limits: BackendLimits;
  /** Optional capabilities such as `shader-f16`, `timestamp-query`. */
  readonly features: readonly string[];
}

export interface MemoryStats {
  readonly liveTensors: number;
  readonly liveBytes: number;
  readonly peakBytes: number;
  /** Allocations made since the backend was created. */
  readonly allocations: number;
}

export interface RunOptions {
  /**
   * Preallocated outputs. An output that aliases an input (an in-place kernel)
   * is always that input and must be left undefined here.
   */
  readonly out?: readonly (Tensor | undefined)[];
}

/** What a backend and a command batch both do: run a kernel on tensors. */
export interface KernelRunner {
  /**
   * Runs `spec` on `inputs`. Returns one tensor per declared output; in-place
   * outputs are the input tensors they alias. Inputs are validated by the spec
   * before anything is enqueued.
   */
  run<A extends AttrValues>(
    spec: KernelSpec<A>,
    inputs: readonly (Tensor | undefined)[],
    attrs?: Partial<A>,
    options?: RunOptions,
  ): Tensor[];
}

/**
 * Records kernels and submits them together: on a GPU, one command encoder and
 * one submission (or one CUDA graph). Output tensors exist as soon as a kernel
 * is recorded and hold their results once `submit()` resolves. `submit()` may
 * be called again to replay everything recorded.
 *
 * `submit()` enqueues the work when it is called, before its promise settles:
 * a `read`, `write`, `copy` or `run` issued right after the call, without
 * awaiting it, is ordered after the batch's work, so a caller may start the
 * readback of an output at once and wait for the device only once (awaiting
 * the submit as well, to learn of its failure).
 */
export interface CommandBatch extends KernelRunner {
  /** Number of recorded kernels. */
  readonly size: number;
  submit(): Promise<void>;
  /**
   * Forgets the recorded kernels and gives back what the batch holds for its
   * replays (a CUDA graph, scratch memory, a recorded command sequence); the
   * batch is empty afterwards. The outputs it allocated stay the caller's.
   */
  dispose(): void;
}

/**
 * Named weight matrices uploaded once, and products against them. A weight is
 * stored `[outFeatures, inFeatures]` (the layout of a linear layer), and
 * `matmul` computes `alpha · x · Wᵀ` for `x` of shape `[M, inFeatures]`.
 */
export interface WeightCache {
  readonly weightCount: number;
  readonly weightBytes: number;
  /** Uploads (or replaces) a weight of shape `[outFeatures, inFeatures]`. */
  upload(name: string, data: HostArray | readonly number[], shape: readonly [number, number]): void;
  has(name: string): boolean;
  delete(name: string): boolean;
  /** Device-resident product: returns a new tensor `[M, outFeatures]`. */
  matmul(name: string, x: Tensor, options?: { alpha?: number }): Tensor;
  /**
   * Host-to-host product through persistent, grow-only input, output and
   * staging buffers: `x` holds `rows × inFeatures` values.
   */
  matmulHost(
    name: string,
    x: Float32Array,
    rows: number,
    options?: { alpha?: number },
  ): Promise<Float32Array>;
  dispose(): void;
}

/** A place where tensors live and kernels run. */
export interface Backend extends KernelRunner {
  readonly name: string;
  readonly info: BackendInfo;
  /**
   * Whether a kernel spec of this name is implemented here and, given `dtype`,
   * runs its float tensors in that dtype (f16, bf16). A call the backend cannot
   * run is an UnsupportedOnBackendError, never an f32 fallback.
   */
  supports(kernel: string, dtype?: DType): boolean;
  /** Copies host data to a new tensor. Numbers are converted to `dtype` (default f32). */
  upload(data: HostArray | readonly number[], shape: Shape, dtype?: DType): Tensor;
  /**
   * Copies host data into an existing tensor (same element count; numbers are
   * converted to its dtype), ordered with the backend's work: after everything
   * already submitted, before anything submitted later. The data is taken at
   * the call, so the caller may reuse the array at once. This is how the
   * per-token values of a recorded batch (positions, lengths, token ids) and
   * its inputs are replaced between replays.
   */
  write(tensor: Tensor, data: HostArray | readonly number[]): void;
  /** A new tensor whose contents are unspecified until written. */
  empty(shape: Shape, dtype?: DType): Tensor;
  /** A new tensor filled with zeros. */
  zeros(shape: Shape, dtype?: DType): Tensor;
  /** Copies a tensor's elements to the host after all pending work on it. */
  read(tensor: Tensor): Promise<HostArray>;
  /** Device-side copy into `dst` (same shape and dtype) or into a new tensor. */
  copy(src: Tensor, dst?: Tensor): Tensor;
  batch(): CommandBatch;
  /** Resolves when all submitted work has finished. */
  sync(): Promise<void>;
  memory(): MemoryStats;
  createWeightCache(): WeightCache;
  /**
   * Device time, in milliseconds, of the kernels `work` records into the given
   * runner, submitted together and measured with device timestamps (WebGPU
   * timestamp queries, CUDA events). Resolves to `undefined` when the device
   * has no timestamps; absent on backends without a device clock.
   */
  deviceTime?(work: (runner: KernelRunner) => void): Promise<number | undefined>;
  /** Frees every resource; tensors of this backend become unusable. */
  dispose(): void;
}
