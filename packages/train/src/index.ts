export {
  type GradCheckInput,
  type GradCheckMismatch,
  type GradCheckOptions,
  type GradCheckResult,
  gradCheck,
} from './autograd/gradcheck.js';
export * from './autograd/index.js';
/**
 * The differentiable operations, each `autograd.op(tape, ...)` with a backward
 * rule. A namespace, because `@rayo/core` exports kernel specs of the same names.
 */
export * as autograd from './autograd/ops/index.js';
export { CausalLM, type CausalLMOptions } from './causalLM.js';
export {
  CHECKPOINT_FORMAT,
  type CheckpointContents,
  type HasParameters,
  type LoadedCheckpoint,
  loadCheckpoint,
  MAX_CHECKPOINT_BYTES,
  readCheckpointFile,
  saveCheckpoint,
  writeCheckpointFile,
} from './checkpoint/checkpoint.js';
export { type FloatDType, roundF32To, widenToF32 } from './checkpoint/floatWords.js';
export {
  type OpenFile,
  openNodeFile,
  type RandomAccessFile,
  readWholeFile,
} from './checkpoint/randomAccessFile.js';
export {
  decodeSafetensors,
  encodeSafetensors,
  type Safetensors,
  type StoredTensor,
} from './checkpoint/safetensors.js';
export {
  readableAsFloat,
  SafetensorsFile,
  type SafetensorsFileOptions,
} from './checkpoint/safetensorsFile.js';
export type { SafetensorsEntry, SafetensorsHeader } from './checkpoint/safetensorsHeader.js';
export * from './distributed/index.js';
export * from './gguf/index.js';
export { checkIntegerAtLeast } from './integerOption.js';
export { FileSystemError } from './io/fileError.js';
export {
  type FetchFunction,
  joinModelPath,
  openUrlFile,
  type UrlFileOptions,
  urlFileOpener,
} from './io/httpRangeFile.js';
export { MAX_JSON_DEPTH, MAX_JSON_FILE_BYTES, readJsonFile } from './io/jsonFile.js';
export {
  formatDuration,
  ProgressBar,
  type ProgressFields,
  type ProgressOptions,
  type ProgressStream,
} from './loop/progress.js';
export {
  type ReplayedBatchInput,
  type ReplayedHostInput,
  type ReplayedInput,
  type ReplayedRunOptions,
  ReplayedStep,
  type ReplayedStepOptions,
} from './loop/replayedStep.js';
export { type StepOptions, type StepResult, trainStep } from './loop/step.js';
export {
  type CheckpointHook,
  type EvaluationHook,
  type Metrics,
  type StepRecord,
  type TrainOptions,
  type TrainResult,
  train,
} from './loop/train.js';
export * from './models/llama/index.js';
export { checkSamplingOptions, type SamplingOptions, sampleToken } from './models/sampling.js';
export * from './nn/index.js';
export * from './optim/index.js';
export {
  checkTrainPrecision,
  matmulPrecisionOf,
  TRAIN_PRECISIONS,
  type TrainPrecision,
} from './precision.js';
export { Rng } from './random.js';
