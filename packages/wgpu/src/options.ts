import { InvalidArgumentError, type MemoryCacheOptions, resolveMaxCachedBytes } from '@rayo/core';
import type { WgpuDeviceOptions } from './device.js';
import type { PipelineStats } from './pipelines.js';
import { resolveWgpuTuning, type WgpuTuning, type WgpuTuningOptions } from './tuning.js';

/** GPU object creation counts: flat once a workload is warm. */
export interface WgpuObjectCounts {
  readonly pipelines: PipelineStats;
  readonly paramBuffers: number;
  readonly storageBuffers: number;
  readonly stagingBuffers: number;
  readonly scratchBuffers: number;
  /** Mapped staging buffers for large uploads (reused once mapped again). */
  readonly uploadStagingBuffers: number;
  /** Bind groups: made once per dispatch when a batch is first submitted, none when it is replayed. */
  readonly bindGroups: number;
}

/** `maxCachedBytes` (core's MemoryCacheOptions) caps the idle buffers the caching allocator keeps. */
export interface WgpuBackendOptions extends WgpuDeviceOptions, WgpuTuningOptions, MemoryCacheOptions {
  /**
   * Treat storage bindings as limited to this many bytes (at most the
   * device's limit): forces the splitting of large operands, for tests.
   */
  readonly maxBindingBytes?: number;
  /**
   * Bytes of mapped staging buffers kept for uploads of 1 MiB and more
   * (default 256 MiB); 0 sends every upload through `queue.writeBuffer`.
   */
  readonly uploadStagingBytes?: number;
  /**
   * Bytes of GPU buffers the backend may hold at once (tensors, pooled,
   * staging and scratch buffers). An allocation beyond it throws an
   * OutOfMemoryError at the allocating call, after pooled buffers are freed.
   * Without it, what the device refuses is reported by the next read, sync or
   * submit.
   */
  readonly memoryBudgetBytes?: number;
  /**
   * Submit a batch in command buffers of growing size: this many commands
   * first, twice as many in each next one, so that the GPU starts on the
   * first while the host encodes the rest. 0 (the default) submits a batch
   * as one command buffer. On an H100 it made no difference to a pipelined
   * decode step and a mixed one to a host-timed batch of 1000 kernels.
   */
  readonly batchFirstPart?: number;
}

/**
 * Every key of WgpuBackendOptions, for `createBackend('wgpu')` to reject any
 * other: a key missing here or not in the interface is a compile error.
 */
const OPTION_KEYS: Readonly<Record<keyof WgpuBackendOptions, true>> = {
  enableToggles: true,
  disableToggles: true,
  f16OnNvidia: true,
  unsafeApis: true,
  robustness: true,
  powerPreference: true,
  adapter: true,
  withoutFeatures: true,
  device: true,
  f16Gemm: true,
  f16Attention: true,
  f16GemmTile: true,
  f16AttentionTile: true,
  fusedColumns: true,
  quantColumns: true,
  quantResident: true,
  quantResidentWorkgroups: true,
  quantPairColumns: true,
  qgemvActivations: true,
  attentionChunk: true,
  qgemvVariant: true,
  qgemvSlices: true,
  maxBindingBytes: true,
  uploadStagingBytes: true,
  memoryBudgetBytes: true,
  maxCachedBytes: true,
  batchFirstPart: true,
};
export const WGPU_OPTION_KEYS: readonly string[] = Object.keys(OPTION_KEYS);

const DEFAULT_UPLOAD_STAGING_BYTES = 256 * 2 ** 20;
const DEFAULT_BATCH_FIRST_PART = 0;

/** The backend's own options, checked and with their defaults. */
export interface ResolvedBackendOptions {
  readonly maxBindingBytes: number | undefined;
  readonly uploadStagingBytes: number;
  readonly memoryBudgetBytes: number;
  readonly maxCachedBytes: number;
  readonly batchFirstPart: number;
  readonly tuning: WgpuTuning;
}

export function resolveBackendOptions(options: WgpuBackendOptions): ResolvedBackendOptions {
  const budget = options.memoryBudgetBytes ?? Number.POSITIVE_INFINITY;
  if (!(budget > 0)) {
    throw new InvalidArgumentError('the memory budget must be a positive number of bytes', {
      operation: 'WgpuBackend.create',
      argument: 'memoryBudgetBytes',
      expected: 'a number > 0',
      actual: String(options.memoryBudgetBytes),
    });
  }
  return {
    maxBindingBytes: options.maxBindingBytes,
    uploadStagingBytes: options.uploadStagingBytes ?? DEFAULT_UPLOAD_STAGING_BYTES,
    memoryBudgetBytes: budget,
    maxCachedBytes: resolveMaxCachedBytes('wgpu', options),
    batchFirstPart: checkBatchFirstPart(options.batchFirstPart),
    tuning: resolveWgpuTuning(options),
  };
}

function checkBatchFirstPart(value: number | undefined): number {
  if (value === undefined) return DEFAULT_BATCH_FIRST_PART;
  if (!Number.isInteger(value) || value < 0) {
    throw new InvalidArgumentError('batchFirstPart must be a whole number of commands', {
      operation: 'WgpuBackend.create',
      argument: 'batchFirstPart',
      expected: 'an integer >= 0 (0: one command buffer per batch)',
      actual: String(value),
    });
  }
  return value;
}
