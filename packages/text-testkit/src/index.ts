export {
  TINY_CHARACTERS,
  TINY_CHAT_TEMPLATE,
  type TinyTextModelOptions,
  writeTinyTextModel,
} from './tinyTextModel.js';
export { LLAMA3, MISTRAL, QWEN3, TEST_VOCABULARIES, type TestVocabulary } from './vocabularies.js';
