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
import type { SubgroupMatrixConfig } from './device.js';
import type { ParamLayout } from './params.js';
import type { ShaderSource } from './pipelines.js';
import type { WgpuTuning } from './tuning.js';
import type { GPUBuffer, GPUBufferBinding, GPUDevice, GPUSupportedLimits } from './webgpuTypes.js';

/** A tensor as a kernel sees it: a buffer range of elements. */
export interface Operand {
  readonly buffer: GPUBuffer;
  /** Byte offset of element 0 in `buffer`. */
  readonly offset: number;
  /** Number of elements. */
  readonly size: number;
  readonly shape: Shape;
  readonly dtype: DType;
}

export interface Dispatch<K extends string = string> {
  readonly shader: ShaderSource;
  /** Bound at @binding(0), (1), … in this order; the params struct comes after them. */
  readonly buffers: readonly (Operand | GPUBufferBinding)[];
  readonly params?: {
    readonly layout: ParamLayout<K>;
    readonly values: Readonly<Record<K, number>> | Readonly<Record<string, number>>;
  };
  /** Workgroup counts; use `gridFor` to spread many workgroups over x and y. */
  readonly workgroups: readonly [number, number?, number?];
}

/** A device's subgroup-matrix configurations and its (fixed) subgroup size. */
export interface SubgroupMatrixSupport {
  readonly configs: readonly SubgroupMatrixConfig[];
  /** The adapter's largest subgroup size (workgroup x sizes must be a multiple of it). */
  readonly subgroupSize: number;
  /** The adapter's smallest subgroup size. */
  readonly minSubgroupSize: number;
}

/** What a kernel encodes with. One encoder records one submission. */
export interface KernelEncoder {
  readonly device: GPUDevice;
  readonly limits: GPUSupportedLimits;
  readonly features: ReadonlySet<string>;
  /**
   * The subgroup-matrix shapes the device can run and its subgroup size,
   * where it has `chromium-experimental-subgroup-matrix`.
   */
  readonly subgroupMatrix?: SubgroupMatrixSupport;
  /** Largest byte range one storage binding may cover (the device limit, or lower when forced). */
  readonly maxBindingBytes: number;
  /** The backend's tuning switches (see WgpuTuningOptions). */
  readonly tuning: WgpuTuning;
  dispatch<K extends string>(d: Dispatch<K>): void;
  /** Device-side copy of `bytes` (a multiple of 4). */
  copy(src: GPUBuffer, srcOffset: number, dst: GPUBuffer, dstOffset: number, bytes: number): void;
  /** A temporary storage buffer that lives until the submission finished. */
  scratch(bytes: number): GPUBuffer;
}

export interface KernelCall<A extends AttrValues> {
  readonly inputs: readonly (Operand | undefined)[];
  readonly outputs: readonly Operand[];
  readonly attrs: A;
  readonly io: KernelIO;
}

/** The WebGPU implementation of one kernel spec. */
export interface WgpuKernel<A extends AttrValues = AttrValues> extends KernelImplementation {
  readonly spec: KernelSpec<A>;
  encode(encoder: KernelEncoder, call: KernelCall<A>): void;
  /**
   * The kernel binds operands larger than `maxBindingBytes` in pieces itself.
   * Without it, such an operand is refused with a clear error, never truncated.
   */
  readonly splitsLargeOperands?: boolean;
}

// biome-ignore lint/suspicious/noExplicitAny: a table of kernels with different attribute types
export type AnyWgpuKernel = WgpuKernel<any>;

/** Typed constructor so `encode` sees the spec's attribute types. */
export function wgpuKernel<A extends AttrValues>(
  spec: KernelSpec<A>,
  encode: (encoder: KernelEncoder, call: KernelCall<A>) => void,
  options: { splitsLargeOperands?: boolean; dtypes?: readonly DType[] } = {},
): WgpuKernel<A> {
  // Float tensors are f32 unless the kernel declares the half dtypes it was written for.
  return { spec, encode, ...options, dtypes: options.dtypes ?? F32_ONLY };
}

/**
 * Splits `count` elements of `elementBytes` bytes into ranges that each fit one
 * binding and start at an offset storage bindings accept.
 */
export function bindingRanges(
  count: number,
  elementBytes: number,
  encoder: Pick<KernelEncoder, 'maxBindingBytes' | 'limits'>,
): { start: number; count: number }[] {
  const align = encoder.limits.minStorageBufferOffsetAlignment;
  const unit = align / gcd(align, elementBytes); // elements per aligned step
  const perRange = Math.max(unit, Math.floor(encoder.maxBindingBytes / elementBytes / unit) * unit);
  const ranges: { start: number; count: number }[] = [];
  for (let start = 0; start < count; start += perRange)
    ranges.push({ start, count: Math.min(perRange, count - start) });
  return ranges;
}

function gcd(a: number, b: number): number {
  return b === 0 ? a : gcd(b, a % b);
}

/** A view of `count` elements of an operand starting at element `start`. */
export function operandRange(operand: Operand, start: number, count: number): Operand {
  const bytes = bytesPerElement(operand.dtype);
  return { ...operand, offset: operand.offset + start * bytes, size: count, shape: [count] };
}

/**
 * Workgroup counts for `count` workgroups, spread over y when x would exceed
 * the per-dimension limit. Shaders recover the linear workgroup index with
 * `linearWorkgroup` below.
 */
export function gridFor(count: number, limits: GPUSupportedLimits): [number, number] {
  const max = limits.maxComputeWorkgroupsPerDimension;
  if (count <= max) return [Math.max(count, 1), 1];
  const y = Math.ceil(count / max);
  return [Math.ceil(count / y), y];
}

/** WGSL: the linear workgroup index for a grid from `gridFor`. */
export const linearWorkgroup = 'wid.x + wid.y * nwg.x';
