// Test doubles of the CUDA driver and NCCL, the PTX interpreter that runs the
// fake device's launches, emulated devices built on them, and the PTX test
// kernels and helpers that @rayo/cuda-ptx's tests share.

export { builderError } from './builderMisuse.js';
export { bulkPipeline, ROW } from './bulkPipelineKernel.js';
export {
  createEmulatedGpu,
  type EmulatedGpu,
  type EmulatedGpuOptions,
  useEmulatedGpu,
} from './emulatedGpu.js';
export {
  type AssemblyJob,
  archJobs,
  assemblesCleanlyTogether,
  BOTH_TARGETS,
  expectAllAssembleCleanly,
  expectAssemblesCleanly,
  itAssemblesForBothTargets,
} from './expectAssembles.js';
export { type FakeKernel, type FakeLaunch, FakeLibCuda, type FakeMemory } from './fakeLibCuda.js';
export { GEMM_UNIT, HALF_POISON, LAYOUTS, useGemmDevice } from './gemmDevice.js';
export { interpretedDevice, type TestDevice, testDevice, useInterpretedDevice } from './interpretedDevice.js';
export { buildNativeFake, NATIVE_FAKE_SOURCES, type NativeFake, nativeFakeGate } from './nativeFakes.js';
export { CollectiveLibCuda, type StreamItem } from './nccl/collectiveLibCuda.js';
export { FakeNccl } from './nccl/fakeNccl.js';
export { PtxInterpreter } from './ptxInterpreter.js';
export { type RecordingEncoder, recordingEncoder } from './recordingEncoder.js';
export { seededUniform } from './seededUniform.js';
export {
  type Buffers,
  bitsF32,
  directLoads,
  f32Bits,
  halfInputs,
  type KernelBody,
  packHalves,
  random,
  randomBf16,
  randomF16,
  reference,
  sharedLoads,
  tf32Reference,
  tf32Tile,
  tileModule,
} from './tensorCoreKernels.js';
export { wgmmaBf16Tile } from './wgmmaKernel.js';
