import { InvalidArgumentError } from '@rayo/core';
import type { GgufValue } from '@rayo/train';
import { parseTokenizerConfig } from '../tokenizer/tokenizerConfig.js';
import type { TokenizerSource } from '../tokenizer/tokenizerSource.js';
import { GGUF_TOKEN_TYPES } from './ggufTokenizer.js';
import { GGUF_PRE_TOKENIZERS } from './preTokenizers.js';

export interface GgufVocabularyOptions {
  /** `tokenizer.ggml.pre` of a byte-level vocabulary (e.g. `llama-bpe`, `qwen2`); required for one. */
  readonly pre?: string;
}

const KERNEL = 'ggufVocabulary';
const BYTE_TOKEN = /^<0x[0-9A-F]{2}>$/;

interface BpeModelJson {
  readonly type?: string;
  readonly vocab: Readonly<Record<string, number>>;
  readonly merges: readonly (string | readonly [string, string])[];
  readonly byte_fallback?: boolean;
  readonly unk_token?: string | null;
}

/**
 * SentencePiece scores that rank pieces as the file's merges do: a piece
 * that merges make scores minus the rank of the first merge that makes it,
 * so that the highest-scoring join is the merge BPE applies first; a piece
 * no merge makes (a character) scores below every merged one; control,
 * byte and added tokens score 0, as llama.cpp's converter writes them.
 */
function mergeScores(
  tokens: readonly string[],
  types: readonly number[],
  merges: readonly (string | readonly [string, string])[],
): number[] {
  const firstRank = new Map<string, number>();
  merges.forEach((m, rank) => {
    const joined = typeof m === 'string' ? m.replace(' ', '') : m[0] + m[1];
    if (!firstRank.has(joined)) firstRank.set(joined, rank);
  });
  return tokens.map((token, id) => {
    if (types[id] !== GGUF_TOKEN_TYPES.normal) return 0;
    const rank = firstRank.get(token);
    return rank === undefined ? -(merges.length + id) : -rank;
  });
}

/**
 * The GGUF `tokenizer.*` metadata of a Hugging Face tokenizer, laid out as
 * llama.cpp's `convert_hf_to_gguf.py` writes it: a byte-level BPE as `gpt2`
 * (tokens, token types, merges, `pre`), a SentencePiece-style BPE with byte
 * fallback as `llama` (tokens, token types, scores falling with the id, as
 * a SentencePiece BPE model's do). Added special tokens are control tokens
 * (the unknown token its own type), other added tokens user-defined,
 * `<0xXX>` pieces bytes. BOS, EOS, unknown and padding ids, `add_bos_token`,
 * `add_eos_token` and the chat template come from the config.
 */
export function ggufVocabulary(
  source: TokenizerSource,
  options: GgufVocabularyOptions = {},
): [string, GgufValue][] {
  const json = source.tokenizer as {
    model?: BpeModelJson;
    added_tokens?: readonly { id: number; content: string; special?: boolean }[];
    normalizer?: { type?: string; normalizers?: readonly { type?: string }[] } | null;
    pre_tokenizer?: { type?: string; prepend_scheme?: string; add_prefix_space?: boolean } | null;
  };
  const model = json.model;
  if (model?.type !== 'BPE' || typeof model.vocab !== 'object' || !Array.isArray(model.merges)) {
    throw new InvalidArgumentError('only BPE vocabularies have a GGUF layout here', {
      operation: KERNEL,
      argument: `${source.name}: model.type`,
      expected: "'BPE'",
      actual: JSON.stringify(model?.type),
    });
  }
  const settings = parseTokenizerConfig(source.name, source.config ?? {});
  const added = json.added_tokens ?? [];
  let size = 0;
  for (const id of Object.values(model.vocab)) size = Math.max(size, id + 1);
  for (const t of added) size = Math.max(size, t.id + 1);
  const tokens: string[] = new Array(size).fill('');
  const types: number[] = new Array(size).fill(GGUF_TOKEN_TYPES.unused);
  for (const [token, id] of Object.entries(model.vocab)) {
    tokens[id] = token;
    types[id] =
      BYTE_TOKEN.test(token) && model.byte_fallback ? GGUF_TOKEN_TYPES.byte : GGUF_TOKEN_TYPES.normal;
  }
  for (const t of added) {
    tokens[t.id] = t.content;
    types[t.id] = !t.special
      ? GGUF_TOKEN_TYPES.userDefined
      : t.content === model.unk_token
        ? GGUF_TOKEN_TYPES.unknown
        : GGUF_TOKEN_TYPES.control;
  }
  const idOf = (token: string | undefined) => {
    if (token === undefined) return undefined;
    const id = tokens.indexOf(token);
    return id < 0 ? undefined : id;
  };
  const u32 = (value: number): GgufValue => ({ type: 'uint32', value });
  const entries: [string, GgufValue][] = [];
  const sentencePiece = model.byte_fallback === true;
  if (sentencePiece) {
    const spacePrefix =
      json.normalizer?.normalizers?.some((n) => n.type === 'Prepend') === true ||
      (json.pre_tokenizer?.type === 'Metaspace' && json.pre_tokenizer.prepend_scheme !== 'never');
    entries.push(
      ['tokenizer.ggml.model', { type: 'string', value: 'llama' }],
      ['tokenizer.ggml.tokens', { type: 'array', itemType: 'string', value: tokens }],
      [
        'tokenizer.ggml.scores',
        { type: 'array', itemType: 'float32', value: mergeScores(tokens, types, model.merges) },
      ],
      ['tokenizer.ggml.token_type', { type: 'array', itemType: 'int32', value: types }],
      ['tokenizer.ggml.add_space_prefix', { type: 'bool', value: spacePrefix }],
    );
  } else {
    if (options.pre === undefined || !GGUF_PRE_TOKENIZERS.includes(options.pre)) {
      throw new InvalidArgumentError('a byte-level vocabulary needs its pre-tokenizer named', {
        operation: KERNEL,
        argument: 'pre',
        expected: GGUF_PRE_TOKENIZERS.map((p) => `'${p}'`).join(' | '),
        actual: options.pre === undefined ? 'absent' : `'${options.pre}'`,
      });
    }
    entries.push(
      ['tokenizer.ggml.model', { type: 'string', value: 'gpt2' }],
      ['tokenizer.ggml.pre', { type: 'string', value: options.pre }],
      ['tokenizer.ggml.tokens', { type: 'array', itemType: 'string', value: tokens }],
      ['tokenizer.ggml.token_type', { type: 'array', itemType: 'int32', value: types }],
      [
        'tokenizer.ggml.merges',
        {
          type: 'array',
          itemType: 'string',
          value: model.merges.map((m) => (typeof m === 'string' ? m : `${m[0]} ${m[1]}`)),
        },
      ],
    );
  }
  const ids: [string, number | undefined][] = [
    ['tokenizer.ggml.bos_token_id', idOf(settings.bosToken)],
    ['tokenizer.ggml.eos_token_id', idOf(settings.eosToken)],
    ['tokenizer.ggml.unknown_token_id', idOf(settings.unkToken ?? model.unk_token ?? undefined)],
    ['tokenizer.ggml.padding_token_id', idOf(settings.padToken)],
  ];
  for (const [key, id] of ids) if (id !== undefined) entries.push([key, u32(id)]);
  // What encode adds: the config's flags, else what a TemplateProcessing post-processor adds.
  const single = (
    json as { post_processor?: { type?: string; single?: readonly Record<string, { id?: string }>[] } }
  ).post_processor;
  const template = single?.type === 'TemplateProcessing' ? (single.single ?? []) : [];
  const specialAt = (i: number) => template.at(i)?.SpecialToken?.id;
  const addBos =
    settings.addBosToken ?? (settings.bosToken !== undefined && specialAt(0) === settings.bosToken);
  const addEos =
    settings.addEosToken ?? (settings.eosToken !== undefined && specialAt(-1) === settings.eosToken);
  entries.push(
    ['tokenizer.ggml.add_bos_token', { type: 'bool', value: addBos }],
    ['tokenizer.ggml.add_eos_token', { type: 'bool', value: addEos }],
  );
  const chat = settings.chatTemplates.get('default') ?? source.chatTemplates?.get('default');
  if (chat !== undefined) entries.push(['tokenizer.chat_template', { type: 'string', value: chat }]);
  return entries;
}
