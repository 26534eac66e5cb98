export { type LlamaCheckpoint, type LlamaCheckpointOptions, openLlamaCheckpoint } from './checkpoint.js';
export { type LlamaConfig, parseLlamaConfig } from './config.js';
export { type GenerateOptions, LlamaModel, type LlamaModelOptions } from './model.js';
export {
  checkLlamaTensors,
  checkLlamaWeights,
  type LlamaLayerWeights,
  type LlamaWeights,
  llamaWeightShapes,
  uploadLlamaWeights,
} from './weights.js';
