import {
  type AttrValues,
  bytesPerElement,
  type DType,
  F32_ONLY,
  type KernelImplementation,
  type KernelIO,
  type KernelSpec,
  type Shape,
} from '@rayo/core';
import type { DeviceProperties } from './driver/driver.js';
import type { TensorMapTiled } from './driver/tensorMap.js';
import type { PtxModule } from './ptx/module.js';
import type { CudaTuning } from './tuning.js';

/** A tensor as a kernel sees it: device memory holding `size` elements. */
export interface Operand {
  /** Device address of element 0. */
  readonly ptr: bigint;
  /** Number of elements. */
  readonly size: number;
  readonly shape: Shape;
  readonly dtype: DType;
  /** `size` times the element size. */
  readonly byteLength: number;
}

/** A kernel argument: an operand (passed as its address), a number, a bigint or an encoded tensor map. */
export type LaunchValue = Operand | number | bigint | Uint8Array;

/** Launch dimensions; missing axes are 1. */
export type LaunchDim = number | readonly [number, number?, number?];

/** One kernel launch, as a kernel family describes it. */
export interface Launch {
  /**
   * The module's identity and configuration, e.g. `elementwise/binary/add/rank2`.
   * The encoder loads a module once per key and reuses it; one key must
   * always build the same PTX.
   */
  readonly key: string;
  /** Builds the module; called only on the first launch of `key`. */
  readonly module: () => PtxModule;
  /** The entry to launch. */
  readonly entry: string;
  readonly grid: LaunchDim;
  readonly block: LaunchDim;
  /** Dynamic shared memory in bytes (the module's `.extern .shared` array). */
  readonly sharedBytes?: number;
  /** One value per entry parameter, by parameter name; checked against the parameter types. */
  readonly args: Readonly<Record<string, LaunchValue>>;
}

/** What a kernel records its work with. Work runs in order on the backend's stream. */
export interface KernelEncoder {
  readonly device: DeviceProperties;
  /** The backend's tuning switches (see CudaBackendOptions). */
  readonly tuning: CudaTuning;
  /** Loads (once per key) and launches a kernel. */
  launch(launch: Launch): void;
  /** The 128 bytes of a tiled tensor map, the value of a `tensorMap` parameter (host work only). */
  tensorMap(tensor: TensorMapTiled): Uint8Array;
  /** Device-to-device copy of `bytes` (cuMemcpyDtoDAsync). */
  copy(src: bigint, dst: bigint, bytes: number): void;
  /** Sets `count` 32-bit words at `dst` to `word` (cuMemsetD32Async). */
  fill32(dst: bigint, word: number, count: number): void;
  /**
   * Temporary device memory for multi-pass kernels. It lives until the work
   * recorded with it has run (eager runs) or as long as the batch that
   * recorded it (graphs replay it).
   */
  scratch(bytes: number): bigint;
  /**
   * `words` u32 completion counters, zero whenever a kernel starts, that a
   * kernel using them must leave zero (`atom.inc` wrapping at the count it
   * waits for does). The backend's launches share them: they run one after
   * another on its stream, each waiting for the one before it.
   */
  completionCounters(words: number): bigint;
}

export interface KernelCall<A extends AttrValues> {
  readonly inputs: readonly (Operand | undefined)[];
  /** One per output; in-place outputs are the inputs they alias. */
  readonly outputs: readonly Operand[];
  readonly attrs: A;
  readonly io: KernelIO;
}

/** The CUDA implementation of one kernel spec. */
export interface CudaKernel<A extends AttrValues = AttrValues> extends KernelImplementation {
  readonly spec: KernelSpec<A>;
  /** Records the spec's work for validated inputs and allocated outputs. */
  launch(encoder: KernelEncoder, call: KernelCall<A>): void;
}

// biome-ignore lint/suspicious/noExplicitAny: a table of kernels with different attribute types
export type AnyCudaKernel = CudaKernel<any>;

/** Typed constructor so that `launch` sees the spec's attribute types. */
export function cudaKernel<A extends AttrValues>(
  spec: KernelSpec<A>,
  launch: (encoder: KernelEncoder, call: KernelCall<A>) => void,
  options: { dtypes?: readonly DType[] } = {},
): CudaKernel<A> {
  // Float tensors are f32 unless the kernel declares the half dtypes it was written for.
  return { spec, launch, dtypes: options.dtypes ?? F32_ONLY };
}

/**
 * A kernel that hands `encode` each call as core describes its launch
 * (`launch`), named by the spec for its errors.
 */
export function launchedKernel<A extends AttrValues, L>(
  spec: KernelSpec<A>,
  launch: (call: KernelCall<A>) => L,
  encode: (encoder: KernelEncoder, call: L & { readonly kernel: string }) => void,
  options: { dtypes?: readonly DType[] } = {},
): CudaKernel<A> {
  return cudaKernel(
    spec,
    (encoder, call) => encode(encoder, { kernel: spec.name, ...launch(call) }),
    options,
  );
}

/**
 * A launch's arguments from parts, later parts winning. Several spreads into
 * one object literal take V8's slow path: a rope launch's ~30 arguments cost
 * about 50 µs of host time a call that way, against about 3 µs here.
 */
export function launchArgs(
  ...parts: readonly Readonly<Record<string, LaunchValue>>[]
): Readonly<Record<string, LaunchValue>> {
  return Object.assign({}, ...parts);
}

/** The device address of element `index` of an operand. */
export function elementPtr(op: Operand, index: number): bigint {
  return op.ptr + BigInt(index * bytesPerElement(op.dtype));
}
