export { type HfWeight, type LlamaToGgufOptions, llamaToGguf, ropeFactorsOf } from './convertLlama.js';
export { dequantize, q4kScaleMin } from './dequantize.js';
export {
  GGML_QUANTIZED_TYPES,
  GGML_TYPES,
  type GgmlFloatType,
  type GgmlQuantizedType,
  type GgmlType,
  ggmlTensorBytes,
  ggmlTypeOfId,
  isGgmlFloatType,
  isGgmlQuantizedType,
} from './ggmlTypes.js';
export {
  GGUF_DEFAULT_ALIGNMENT,
  GGUF_MAGIC,
  GGUF_MAX_ARRAY_DEPTH,
  GGUF_MAX_METADATA_ITEMS,
  GgufFile,
  type GgufFileOptions,
  type GgufTensorInfo,
} from './ggufFile.js';
export {
  type GgufLlamaArchitecture,
  ggufArchitecture,
  ggufLlamaConfig,
  ggufLlamaMetadata,
} from './llamaConfig.js';
export {
  LLAMA_CPP_MIXES,
  type LlamaCppMix,
  llamaCppTypeOf,
  writeLlamaCppMix,
} from './llamaCppMixes.js';
export { ggufNameOfHf, hfNameOfGguf } from './llamaNames.js';
export {
  checkGgufLlamaTensors,
  type GgufLlama,
  type GgufLlamaLoadOptions,
  type GgufLlamaOpenOptions,
  type GgufLlamaUploadOptions,
  type GgufLlamaWeight,
  type GgufLlamaWeights,
  ggufLlamaWeightList,
  ggufWeightDtype,
  loadGgufLlama,
  openGgufLlama,
  uploadGgufLlamaWeights,
} from './loadLlama.js';
export {
  GGUF_VALUE_TYPES,
  type GgufArray,
  type GgufMetadata,
  type GgufValue,
  type GgufValueType,
  metadataArrayLength,
  metadataInteger,
  metadataNumber,
  metadataString,
} from './metadata.js';
export { PackedStrings, utf8Hash } from './packedStrings.js';
export { type PreparedTensor, type PreparedWeights, uploadPrepared } from './preparedWeights.js';
export { quantize } from './quantize.js';
export {
  checkQuantizedDecode,
  dequantizeOnHost,
  type QuantizedDecodeResult,
  q4kmTestConfig,
  q4kmTypeOf,
  seededLlamaWeights,
  useMoreBits,
  writeQ4kmLlama,
} from './quantizedDecodeCheck.js';
export {
  type GgufQuantizedTensor,
  type GgufRepack,
  ggufAsCoreFormat,
  type HalfScalesAndOffsets,
  type Int4Groups,
  type Int8F32Groups,
  type Int8Groups,
  type Int8OffsetGroups,
  type Q4KSuperBlocks,
  type Q5KSuperBlocks,
  type Q5Rows,
  type Q6KSuperBlocks,
  q4_0AsQ4g32,
  q4_KAsQ4g32a,
  q4_KAsQ4k,
  q5_0AsQ8g32,
  q5_1AsQ8g32a,
  q5_KAsQ5k,
  q5_KAsQ8g32a,
  q6_KAsQ6k,
  q6_KAsQ8g16,
  q8_0AsQ8g32,
  type RepackedWeight,
  refuseQuantized,
  repackedWeightOf,
  repackOntoCoreFormats,
  repackQ4_0,
  repackQ4_1,
  repackQ4_K,
  repackQ4_KSuperBlocks,
  repackQ5_0,
  repackQ5_1,
  repackQ5_K,
  repackQ5_KSuperBlocks,
  repackQ5Rows,
  repackQ6_K,
  repackQ6_KSuperBlocks,
  repackQ8_0,
  type Uint4OffsetGroups,
} from './repack.js';
export { ggufRowsToHf, hfRowsToGguf } from './ropePermutation.js';
export {
  encodeGguf,
  type GgufContents,
  type GgufTensorToWrite,
  ggufPieces,
  writeGgufFile,
} from './writer.js';
