import { type BackendProvider, registerBackend } from '@rayo/core';
import { CudaBackend, type CudaBackendOptions } from './backend.js';
import { CUDA_SUCCESS, cudaErrorName } from './driver/errors.js';
import { type LibCuda, libCuda, loadLibCuda } from './driver/libcuda.js';
import { cudaOptionsFromEnvironment } from './environment.js';
import { CUDA_OPTION_KEYS } from './optionKeys.js';

// Types `createBackend('cuda', options)` for every program that imports this package.
declare module '@rayo/core' {
  interface BackendOptionsMap {
    cuda: CudaBackendOptions;
  }
}

export {
  CudaBackend,
  type CudaBackendOptions,
} from './backend.js';
export { CudaCommandBatch, type RecordedCall } from './batch.js';
export {
  CudaDriver,
  type CudaDriverOptions,
  type DeviceCommand,
  type DeviceProperties,
  type Dim3Tuple,
  type DriverCounts,
  type LoadedFunction,
} from './driver/driver.js';
export {
  type CUresult,
  CudaCallError,
  type CudaFailure,
  cudaError,
  cudaErrorName,
  isStickyError,
} from './driver/errors.js';
export {
  CU_DEVICE_ATTRIBUTE,
  CU_EVENT_DISABLE_TIMING,
  type CuOut,
  defaultLibCudaPath,
  type HostBlock,
  type JitLogs,
  type LibCuda,
  type LoadLibCudaOptions,
  libCuda,
  loadLibCuda,
} from './driver/libcuda.js';
export { checkParamValue, kernelParamBytes, type ParamValue, writeKernelParams } from './driver/params.js';
export { type DeviceBuffer, DevicePool } from './driver/pool.js';
export {
  TENSOR_MAP_DTYPE,
  TENSOR_MAP_SWIZZLE,
  type TensorMapDType,
  type TensorMapTiled,
  tensorMapProblem,
} from './driver/tensorMap.js';
export { CommandRecorder } from './encoder.js';
export { cudaOptionsFromEnvironment } from './environment.js';
export {
  type AnyCudaKernel,
  type CudaKernel,
  cudaKernel,
  elementPtr,
  type KernelCall,
  type KernelEncoder,
  type Launch,
  type LaunchDim,
  type LaunchValue,
  type Operand,
} from './kernel.js';
export { CUDA_KERNELS } from './kernels/index.js';
export { QGEMV_INT8_FORMATS } from './kernels/quantizedGemvInt8.js';
export * from './nccl/index.js';
export * from './ptx/index.js';
export { runOnStream } from './runOnStream.js';
export {
  ATTENTION_SPLIT_CHOICES,
  ATTENTION_UNROLL_CHOICES,
  type AttentionSplitTokens,
  type AttentionUnroll,
  type CudaTuning,
  type CudaTuningOptions,
  DEFAULT_CUDA_TUNING,
  QGEMV_ACTIVATION_CHOICES,
  QGEMV_BLOCKS_PER_SM_CHOICES,
  QGEMV_DEPTH_CHOICES,
  QGEMV_MMA_CHOICES,
  QGEMV_PERSISTENT_CHOICES,
  type QgemvActivations,
  type QgemvBlocksPerSm,
  type QgemvDepth,
  type QgemvMma,
  type QgemvPersistent,
  resolveCudaTuning,
  WEIGHT_PREFETCH_CHOICES,
  type WeightPrefetch,
} from './tuning.js';

/** Creates the CUDA backend on device 0 (or `options.device`), loading `libcuda` through koffi. */
export function createCudaBackend(options?: CudaBackendOptions): Promise<CudaBackend> {
  return CudaBackend.create(options);
}

/** Why CUDA cannot run here, or undefined when `libcuda` loads, initialises and has a device. */
async function probe(lib: LibCuda): Promise<string | undefined> {
  const name = (code: number) => lib.cuGetErrorName(code).value ?? cudaErrorName(code);
  const init = lib.cuInit(0);
  if (init !== CUDA_SUCCESS) return `cuInit failed: ${name(init)} (${init})`;
  const count = lib.cuDeviceGetCount();
  if (count.status !== CUDA_SUCCESS)
    return `cuDeviceGetCount failed: ${name(count.status)} (${count.status})`;
  if (count.value < 1) return 'the CUDA driver reports no device';
  return undefined;
}

/** How `createBackend('cuda')` finds and probes this backend. */
export const backendProvider: BackendProvider = {
  name: 'cuda',
  async probe() {
    try {
      return await probe(await libCuda());
    } catch (error) {
      return (error as Error).message;
    }
  },
  create: (options) => CudaBackend.create(options as CudaBackendOptions | undefined),
  optionKeys: CUDA_OPTION_KEYS,
  optionsFromEnvironment: (env) => ({ ...cudaOptionsFromEnvironment(env) }),
};

// Importing the package registers the backend, so that `createBackend('cuda')`
// finds it in a bundle too (a program's own registration of 'cuda' wins).
registerBackend(backendProvider, { replace: false });

/** Probes a given library (e.g. one loaded from a non-default path). */
export async function probeLibCuda(path?: string): Promise<string | undefined> {
  try {
    return await probe(path === undefined ? await libCuda() : await loadLibCuda({ path }));
  } catch (error) {
    return (error as Error).message;
  }
}
