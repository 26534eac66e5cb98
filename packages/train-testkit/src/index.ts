export {
  FAMILY_CONFIGS,
  llama2Config,
  llama31Transformers5Config,
  llama32Config,
  mistral01Config,
  mistral03Config,
  qwen3Config,
  qwen25Config,
  smolLM2Config,
  tinyLlama11Config,
} from './familyConfigs.js';
export { memoryFile } from './memoryFile.js';
export { RENDEZVOUS_RANK_PROGRAM } from './rankPrograms.js';
export {
  familyFeatures,
  referenceGreedy,
  referenceLogits,
  removeTinyLlamas,
  ropeFrequenciesOf,
  roundedTinyWeights,
  type TinyWeights,
  tinyLlamaConfig,
  tinyLlamaWeights,
  writeTinyLlama,
} from './tinyLlama.js';
