export { type AllocatorStats, uncachedStats } from './allocator/allocatorStats.js';
export { type MemoryCacheOptions, resolveMaxCachedBytes } from './allocator/cacheOptions.js';
export {
  CachingAllocator,
  type CachingAllocatorOptions,
  type DeviceBlock,
  type DeviceSegments,
} from './allocator/cachingAllocator.js';
export { ScratchArena, type ScratchSource } from './allocator/scratchArena.js';
export {
  type Backend,
  type BackendInfo,
  type BackendLimits,
  type BatchOptions,
  type CommandBatch,
  type KernelCallArgs,
  type KernelRunner,
  type MemoryStats,
  type RunOptions,
  Tensor,
  type TensorStorage,
  type WeightCache,
} from './backend.js';
export type { BackendOptionsMap, BackendOptionsOf } from './backendOptions.js';
export type { BackendProvider } from './backendProvider.js';
export { BatchCalls, type CallRecorder, type RecordedKernelCall, RecordingBatch } from './batchCalls.js';
export {
  type BroadcastPlan,
  broadcastPlan,
  kernelBroadcastPlan,
  MAX_BROADCAST_RANK,
} from './broadcastPlan.js';
export * from './communicator.js';
export {
  type CompileProgress,
  compileProgress,
  type ProgressOutput,
  type SlowCompile,
  type SlowCompileHandler,
} from './compileProgress.js';
export { CpuBackend, cpuBackendProvider, createCpuBackend } from './cpu/backend.js';
export { type DecodeStep, type DevicePosition, decodeStep } from './decodeStep.js';
export * from './dtype.js';
export * from './errors.js';
export { checkShapeAndDType, checkWrite, hostDataFor, ownedStorage } from './hostData.js';
export {
  type AnyKernelSpec,
  type AttrDecl,
  type AttrDecls,
  type AttrValue,
  type AttrValues,
  defineKernel,
  deviceAttribute,
  dtypeGroupOf,
  type InputDecl,
  type InputMetas,
  inputDecl,
  inputName,
  type KernelCost,
  type KernelIO,
  type KernelSpec,
  type OutputMeta,
  runReference,
  type TensorMeta,
} from './kernel.js';
export { resolveAttrs } from './kernelAttrs.js';
export {
  type CheckedCall,
  checkCall,
  F32_ONLY,
  floatDtypesOf,
  type KernelImplementation,
  KernelTable,
  type PreparedCall,
} from './kernelCall.js';
export {
  checkDtypeGroups,
  checkInputs,
  checkOutputs,
  checkTensorAlive,
  inferKernel,
  type PreparedKernel,
  prepareKernel,
} from './kernelChecks.js';
export { ArgCheck } from './kernels/check.js';
export {
  type FusedLaunch,
  gateUpSwigluLaunch,
  rmsNormMatmul3Launch,
  rmsNormMatmulLaunch,
} from './kernels/fusedLaunch.js';
export * from './kernels/index.js';
export {
  batchedMatmulLaunch,
  linearLaunch,
  type MatmulDims,
  type MatmulLaunch,
  type MatmulTile,
  matmulLaunch,
} from './kernels/matmulLaunch.js';
export type { AttrsOf, SpecCall } from './kernels/specCall.js';
export { FLOAT, type NoAttrs, OUT_DTYPES, type OutDType, pow2AtLeast } from './kernels/vocabulary.js';
export {
  PART_CHECKSUM_BLOCK_BYTES,
  PART_CHECKSUM_LANES,
  PART_CHECKSUM_PRIME,
  partChecksumBlocks,
  partChecksumBlockWord,
  partChecksumLaneStart,
  partChecksumLanes,
  partChecksumOfBlocks,
  partChecksumReference,
} from './partChecksum.js';
export { checkInputsWritten, checkWritten, PendingWrites } from './pendingWrites.js';
export { poolBucketBytes, SizeBuckets } from './poolBuckets.js';
export * from './quant/index.js';
export {
  type BackendStatus,
  backendOptionsFromEnvironment,
  createBackend,
  knownBackendNames,
  onSlowBackendCompile,
  probeBackends,
  type RegisterOptions,
  registerBackend,
} from './registry.js';
export * from './shape.js';
export { BackendSkeleton } from './skeleton/backendSkeleton.js';
export { DeviceStorage } from './skeleton/deviceStorage.js';
export { LiveStats } from './skeleton/liveStats.js';
export { SequentialBatch } from './skeleton/sequentialBatch.js';
export { type TrackedCall, TrackingRunner, type TrackingRunnerOptions } from './trackingRunner.js';
export {
  checkChoice,
  choiceFromEnvironment,
  type EnvironmentVariables,
  type OptionSource,
  type QgemvOptions,
  type QgemvTuning,
  qgemvOptionsFromEnvironment,
  resolveQgemvOptions,
} from './tuningOptions.js';
export { CORE_VERSION } from './version.js';
export { DeviceWeightCache, type WeightCacheDevice } from './weightCache.js';
