export { type AttentionOptions, CausalSelfAttention } from './attention.js';
export {
  type BlockCheckpointing,
  checkBlockCheckpointing,
  checkpointingFromName,
  checkpointingName,
  isCheckpointed,
} from './checkpointing.js';
export { Embedding, type EmbeddingOptions } from './embedding.js';
export { Linear, type LinearOptions } from './linear.js';
export { MLP, type MlpOptions } from './mlp.js';
export { type InitOptions, Module, Parameter, rngOf } from './module.js';
export { LayerNorm, type NormOptions, RMSNorm } from './norm.js';
export { TransformerBlock, type TransformerBlockOptions } from './transformer.js';
