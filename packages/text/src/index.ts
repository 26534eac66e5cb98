export type { LoadProgress } from '@rayo/train';
export { type ChatMessage, ChatTemplate, type ChatTemplateOptions } from './chat/chatTemplate.js';
export {
  type GenerationDefaults,
  parseGenerationConfig,
  readGenerationConfig,
} from './generation/generationConfig.js';
export { StopStrings } from './generation/stopStrings.js';
export { GGUF_TOKEN_TYPES, GGUF_TOKENIZER_MODELS, ggufTokenizerSource } from './gguf/ggufTokenizer.js';
export { type GgufVocabularyOptions, ggufVocabulary } from './gguf/ggufVocabulary.js';
export { byteLevelPreTokenizer, GGUF_PRE_TOKENIZERS } from './gguf/preTokenizers.js';
export { sentencePieceMerges } from './gguf/sentencePieceMerges.js';
export { inspectModelFiles, type ModelFiles, namesGguf } from './model/modelFiles.js';
export {
  DEFAULT_MAX_SEQUENCE,
  type FinishReason,
  type GenerateTextOptions,
  type GenerationStats,
  type TextGeneration,
  TextModel,
  type TextModelLoadOptions,
} from './model/textModel.js';
export { TextStream, type TextStreamOptions } from './stream/textStream.js';
export {
  type CharacterTokenizerOptions,
  characterTokenizerFiles,
  type TokenizerFiles,
} from './tokenizer/characterTokenizer.js';
export { readHuggingFaceTokenizer } from './tokenizer/huggingFaceFolder.js';
export {
  type DecodeOptions,
  type EncodeOptions,
  Tokenizer,
  type TokenizerJson,
  type TokenizerSource,
} from './tokenizer/tokenizer.js';
export { parseTokenizerConfig, type TokenizerSettings } from './tokenizer/tokenizerConfig.js';
