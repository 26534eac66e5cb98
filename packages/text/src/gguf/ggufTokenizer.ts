import { InvalidArgumentError } from '@rayo/core';
import type { GgufMetadata } from '@rayo/train';
import { bpeModel, packedBpeModel, vocabularyOf } from '../tokenizer/bpeModel.js';
import { sentencePieceDecoder } from '../tokenizer/tokenizerClasses.js';
import type { TokenizerSource } from '../tokenizer/tokenizerSource.js';
import {
  metadataString,
  numberArray,
  optionalBool,
  optionalTokenId,
  packedStringArray,
} from './ggufMetadataValues.js';
import { byteLevelPreTokenizer } from './preTokenizers.js';
import { sentencePieceMerges } from './sentencePieceMerges.js';

/** GGUF `tokenizer.ggml.token_type` values (llama.cpp's `llama_token_type`). */
export const GGUF_TOKEN_TYPES = {
  normal: 1,
  unknown: 2,
  control: 3,
  userDefined: 4,
  unused: 5,
  byte: 6,
} as const;

/** The GGUF tokenizer models read here. */
export const GGUF_TOKENIZER_MODELS: readonly string[] = ['gpt2', 'llama'];

const KERNEL = 'Tokenizer.fromGguf';

/** One post-processor that adds BOS and/or EOS around a single text (and a pair). */
function templateProcessing(bos: string | undefined, eos: string | undefined): Record<string, unknown> {
  const special = (token: string, typeId: number) => ({ SpecialToken: { id: token, type_id: typeId } });
  const sequence = (id: 'A' | 'B', typeId: number) => ({ Sequence: { id, type_id: typeId } });
  const around = (id: 'A' | 'B', typeId: number) => [
    ...(bos !== undefined ? [special(bos, typeId)] : []),
    sequence(id, typeId),
    ...(eos !== undefined ? [special(eos, typeId)] : []),
  ];
  return {
    type: 'TemplateProcessing',
    single: around('A', 0),
    pair: [...around('A', 0), ...around('B', 1)],
    special_tokens: {},
  };
}

/**
 * The tokenizer.json (and config) of a GGUF file's vocabulary, built as
 * transformers builds it from the same metadata: `gpt2` (byte-level BPE
 * with `tokenizer.ggml.merges`, split by `tokenizer.ggml.pre`) or `llama`
 * (SentencePiece BPE with byte fallback, merges ranked by
 * `tokenizer.ggml.scores`). Control and unknown tokens become special added
 * tokens, user-defined ones plain added tokens.
 */
export function ggufTokenizerSource(metadata: GgufMetadata, name: string): TokenizerSource {
  const model = metadataString(metadata, 'tokenizer.ggml.model');
  if (model === undefined || !GGUF_TOKENIZER_MODELS.includes(model)) {
    throw new InvalidArgumentError(
      model === undefined ? `${name} has no tokenizer` : `${name}: the GGUF tokenizer model is not supported`,
      {
        operation: KERNEL,
        argument: 'tokenizer.ggml.model',
        expected: GGUF_TOKENIZER_MODELS.map((m) => `'${m}'`).join(' | '),
        actual: model === undefined ? 'absent' : `'${model}'`,
      },
    );
  }
  // Packed: a byte-level vocabulary's tokens and merges are indexed in place, never made one by one.
  const tokens = packedStringArray(metadata, 'tokenizer.ggml.tokens');
  const types =
    numberArray(metadata, 'tokenizer.ggml.token_type') ??
    new Array<number>(tokens.length).fill(GGUF_TOKEN_TYPES.normal);
  if (types.length !== tokens.length) {
    throw new InvalidArgumentError('one token type per token is needed', {
      operation: KERNEL,
      argument: 'tokenizer.ggml.token_type',
      expected: `${tokens.length} types (the length of tokenizer.ggml.tokens)`,
      actual: `${types.length}`,
    });
  }
  const n = tokens.length;
  const bosId = optionalTokenId(metadata, 'tokenizer.ggml.bos_token_id', n);
  const eosId = optionalTokenId(metadata, 'tokenizer.ggml.eos_token_id', n);
  const unkId = optionalTokenId(metadata, 'tokenizer.ggml.unknown_token_id', n);
  const padId = optionalTokenId(metadata, 'tokenizer.ggml.padding_token_id', n);
  const extraEos = ['tokenizer.ggml.eot_token_id', 'tokenizer.ggml.eom_token_id']
    .map((key) => optionalTokenId(metadata, key, n))
    .filter((id): id is number => id !== undefined);
  const sentencePiece = model === 'llama';
  // llama.cpp's defaults: a SentencePiece vocabulary adds BOS, a byte-level one does not.
  const addBos = optionalBool(metadata, 'tokenizer.ggml.add_bos_token') ?? sentencePiece;
  const addEos = optionalBool(metadata, 'tokenizer.ggml.add_eos_token') ?? false;
  const tokenOf = (id: number | undefined) => (id === undefined ? undefined : tokens.at(id));

  const addedTokens = [];
  for (let id = 0; id < n; id++) {
    const type = types[id];
    const special =
      type === GGUF_TOKEN_TYPES.control || type === GGUF_TOKEN_TYPES.unknown || id === bosId || id === eosId;
    if (!special && type !== GGUF_TOKEN_TYPES.userDefined) continue;
    const content = tokens.at(id);
    addedTokens.push({
      id,
      content,
      special,
      single_word: false,
      lstrip: false,
      rstrip: false,
      normalized: false,
    });
  }

  let tokenizer: Record<string, unknown>;
  if (sentencePiece) {
    const scores = numberArray(metadata, 'tokenizer.ggml.scores');
    if (scores === undefined || scores.length !== n) {
      throw new InvalidArgumentError('a SentencePiece vocabulary needs one score per token', {
        operation: KERNEL,
        argument: 'tokenizer.ggml.scores',
        expected: `${n} scores`,
        actual: scores === undefined ? 'absent' : `${scores.length}`,
      });
    }
    const spacePrefix = optionalBool(metadata, 'tokenizer.ggml.add_space_prefix') ?? true;
    const list = tokens.toArray();
    const merges = sentencePieceMerges(list, scores, (id) => types[id] === GGUF_TOKEN_TYPES.normal);
    tokenizer = {
      version: '1.0',
      added_tokens: addedTokens,
      normalizer: {
        type: 'Sequence',
        normalizers: [
          ...(spacePrefix ? [{ type: 'Prepend', prepend: '▁' }] : []),
          { type: 'Replace', pattern: { String: ' ' }, content: '▁' },
        ],
      },
      pre_tokenizer: null,
      post_processor: templateProcessing(
        addBos ? tokenOf(bosId) : undefined,
        addEos ? tokenOf(eosId) : undefined,
      ),
      decoder: sentencePieceDecoder(spacePrefix),
      model: bpeModel(vocabularyOf(list), merges, {
        unkToken: tokenOf(unkId) ?? null,
        fuseUnk: true,
        byteFallback: true,
        tokensById: list,
      }),
    };
  } else {
    const merges = packedStringArray(metadata, 'tokenizer.ggml.merges');
    const split = byteLevelPreTokenizer(metadataString(metadata, 'tokenizer.ggml.pre'));
    tokenizer = {
      version: '1.0',
      added_tokens: addedTokens,
      normalizer: split.normalizer,
      pre_tokenizer: split.preTokenizer,
      post_processor: templateProcessing(
        addBos ? tokenOf(bosId) : undefined,
        addEos ? tokenOf(eosId) : undefined,
      ),
      decoder: { type: 'ByteLevel', add_prefix_space: false, trim_offsets: false, use_regex: false },
      model: packedBpeModel({ tokens, merges }, { ignoreMerges: split.ignoreMerges }),
    };
  }

  const templates = new Map<string, string>();
  const main = metadataString(metadata, 'tokenizer.chat_template');
  if (main !== undefined) templates.set('default', main);
  const named = metadata.get('tokenizer.chat_templates');
  if (named?.type === 'array' && named.itemType === 'string') {
    for (const key of named.value) {
      const template = metadataString(metadata, `tokenizer.chat_template.${key}`);
      if (template !== undefined) templates.set(key, template);
    }
  }
  const config: Record<string, unknown> = {
    add_bos_token: addBos,
    add_eos_token: addEos,
    bos_token: tokenOf(bosId) ?? null,
    eos_token: tokenOf(eosId) ?? null,
    unk_token: tokenOf(unkId) ?? null,
    pad_token: tokenOf(padId) ?? null,
  };
  return { name, tokenizer, config, chatTemplates: templates, extraEosTokenIds: extraEos };
}
