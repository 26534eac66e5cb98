import { type BackendInfo, GATED_PRODUCT_TILES, HALF_OPERAND_PASS } from '@rayo/core';
import type { ParamInfo } from '../ptx/module.js';
import type { FailureContext } from './errors.js';
import { CU_DEVICE_ATTRIBUTE, type CuOut, type LibCuda } from './libcuda.js';
import type { ParamValue } from './params.js';

// What the driver reads about its device and hands out: the device's
// properties, loaded functions, recorded stream commands and its counters.

/** What rayo needs to know about the device to size launches and report itself. */
export interface DeviceProperties {
  readonly ordinal: number;
  readonly name: string;
  readonly computeCapability: readonly [number, number];
  /** The architecture PTX is assembled for on this device, e.g. `sm_90`. */
  readonly arch: string;
  readonly multiprocessors: number;
  readonly totalMemory: number;
  readonly maxThreadsPerBlock: number;
  readonly maxBlockDim: readonly [number, number, number];
  readonly maxGridDim: readonly [number, number, number];
  /** Static plus dynamic shared memory a block gets without opting in. */
  readonly sharedMemoryPerBlock: number;
  /** The most a block can get after `cuFuncSetAttribute`. */
  readonly sharedMemoryPerBlockOptin: number;
  readonly maxThreadsPerMultiprocessor: number;
  readonly warpSize: number;
  readonly l2CacheBytes: number;
}

/** A kernel entry loaded from a module, with the parameters its launches marshal. */
export interface LoadedFunction {
  /** The module's cache key (kernel identity + configuration). */
  readonly key: string;
  readonly entry: string;
  readonly handle: bigint;
  readonly params: readonly ParamInfo[];
}

export type Dim3Tuple = readonly [number, number, number];

/** One unit of stream work, recorded first and enqueued later (at once, or into a graph). */
export type DeviceCommand =
  | {
      readonly kind: 'launch';
      readonly fn: LoadedFunction;
      readonly grid: Dim3Tuple;
      readonly block: Dim3Tuple;
      readonly sharedBytes: number;
      readonly values: readonly ParamValue[];
    }
  | { readonly kind: 'copy'; readonly src: bigint; readonly dst: bigint; readonly bytes: number }
  | { readonly kind: 'fill32'; readonly dst: bigint; readonly word: number; readonly count: number };

export interface DriverCounts {
  /** Modules JIT-loaded so far. */
  readonly moduleLoads: number;
  /** Function lookups answered from the cache. */
  readonly moduleHits: number;
  /** Real device allocations (cuMemAlloc) so far. */
  readonly allocations: number;
  /** Allocation requests served from the pool. */
  readonly reusedAllocations: number;
  readonly pooledBytes: number;
}

/** The properties of device `dev`, each read through `value` (which turns a failed call into its RayoError). */
export function readDeviceProperties(
  lib: LibCuda,
  ordinal: number,
  dev: number,
  value: <T>(call: string, out: CuOut<T>, context?: FailureContext) => T,
): DeviceProperties {
  const attr = (name: keyof typeof CU_DEVICE_ATTRIBUTE) =>
    value('cuDeviceGetAttribute', lib.cuDeviceGetAttribute(CU_DEVICE_ATTRIBUTE[name], dev), {
      detail: `CU_DEVICE_ATTRIBUTE_${name}`,
    });
  const major = attr('COMPUTE_CAPABILITY_MAJOR');
  const minor = attr('COMPUTE_CAPABILITY_MINOR');
  const shared = attr('MAX_SHARED_MEMORY_PER_BLOCK');
  return {
    ordinal,
    name: value('cuDeviceGetName', lib.cuDeviceGetName(dev)),
    computeCapability: [major, minor],
    arch: `sm_${major}${minor}`,
    multiprocessors: attr('MULTIPROCESSOR_COUNT'),
    totalMemory: value('cuDeviceTotalMem_v2', lib.cuDeviceTotalMem_v2(dev)),
    maxThreadsPerBlock: attr('MAX_THREADS_PER_BLOCK'),
    maxBlockDim: [attr('MAX_BLOCK_DIM_X'), attr('MAX_BLOCK_DIM_Y'), attr('MAX_BLOCK_DIM_Z')],
    maxGridDim: [attr('MAX_GRID_DIM_X'), attr('MAX_GRID_DIM_Y'), attr('MAX_GRID_DIM_Z')],
    sharedMemoryPerBlock: shared,
    sharedMemoryPerBlockOptin: Math.max(shared, attr('MAX_SHARED_MEMORY_PER_BLOCK_OPTIN')),
    maxThreadsPerMultiprocessor: attr('MAX_THREADS_PER_MULTIPROCESSOR'),
    warpSize: attr('WARP_SIZE'),
    l2CacheBytes: attr('L2_CACHE_SIZE'),
  };
}

/** The backend info of a CUDA device. */
export function cudaBackendInfo(d: DeviceProperties): BackendInfo {
  return {
    name: 'cuda',
    device: `${d.name} (${d.arch}, ${d.multiprocessors} SMs)`,
    kind: 'gpu',
    // Kernels refuse operands beyond MAX_ELEMENTS themselves, naming the argument.
    limits: { maxBufferBytes: d.totalMemory },
    // sm_80+ runs precision 'half' on tensor cores after a pass that rounds f32 operands.
    features: [
      d.arch,
      'cuda-graphs',
      'events',
      ...(d.computeCapability[0] >= 8 ? [HALF_OPERAND_PASS] : []),
      // The gated wgmma kernel (matmulWgmmaGated.ts) is sm_90a's.
      ...(d.computeCapability[0] === 9 && d.computeCapability[1] === 0 ? [GATED_PRODUCT_TILES] : []),
    ],
  };
}
