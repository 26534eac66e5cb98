export { type LlamaCheckpoint, type LlamaCheckpointOptions, openLlamaCheckpoint } from './checkpoint.js';
export { checkSlidingWindow, LLAMA_CONFIG_LIMITS, type LlamaConfig, parseLlamaConfig } from './config.js';
export {
  familyOfConfig,
  LLAMA_FAMILIES,
  type LlamaFamily,
  type LlamaFamilyName,
  llamaFamily,
} from './families.js';
export { fuseQkvProjections, fuseQuantizedQkv } from './fusedQkv.js';
export { type LoadProgress, type LoadProgressCallback, LoadProgressCounter } from './loadProgress.js';
export { LlamaModel } from './model.js';
export type {
  GenerateOptions,
  LlamaLoadOptions,
  LlamaModelOptions,
  LlamaPrefillPrecision,
} from './modelOptions.js';
export type { BatchedStepInputs } from './paged/batchedForward.js';
export { type PagedCacheOptions, type PagedDecodeRow, PagedLlama } from './paged/pagedLlama.js';
export { BlockTable, PagePool, type PagePoolUsage } from './paged/pagePool.js';
export {
  defaultQuantizePath,
  disposeQuantizedLayer,
  LlamaLayerQuantizer,
  type LlamaQuantizationReport,
  type LlamaQuantizePath,
  type LlamaWeightFormat,
  type QuantizedLlamaLayer,
  quantizeLlamaLayers,
} from './quantizedLayers.js';
export {
  checkLlamaTensors,
  checkLlamaWeights,
  checkpointWeightDtype,
  type LlamaLayerWeights,
  type LlamaWeightDType,
  type LlamaWeightDTypeChoice,
  type LlamaWeights,
  llamaWeightShapes,
  uploadLlamaWeights,
} from './weights.js';
