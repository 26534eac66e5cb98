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
export {
  checkpointFolderReader,
  TINY_CONFIG,
  validFolder,
} from './hostile/checkpointFolderCases.js';
export { ggufLlamaReader, ggufReader, tinyLlamaGguf, validGguf } from './hostile/ggufCases.js';
export {
  type HostileCase,
  type HostileReader,
  hostileCorpus,
  writeHostileCorpus,
} from './hostile/hostileCorpus.js';
export { link, put } from './hostile/hostileFiles.js';
export { safetensorsReader, validSafetensors } from './hostile/safetensorsCases.js';
export { limitedBackend } from './limitedBackend.js';
export { memoryFile } from './memoryFile.js';
export {
  collectTokens,
  expectReferenceGreedy,
  greedyAgainstReference,
  ModelScope,
  maxAbsDiff,
  maxRowDiff,
  modelTestBackends,
} from './modelChecks.js';
export {
  type RangeServer,
  type RangeServerOptions,
  type ServedRequest,
  serveRanges,
} from './rangeServer.js';
export { RENDEZVOUS_RANK_PROGRAM } from './rankPrograms.js';
export { temporaryDirectories, temporaryDirectory } from './temporaryDirectories.js';
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
