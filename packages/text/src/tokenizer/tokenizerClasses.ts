import type { TokenizerJson } from './tokenizerSource.js';

// transformers 5 builds a tokenizer whose class has its own pipeline (the
// `tokenizer_class` of tokenizer_config.json) from that class's definition,
// taking only the vocabulary, merges, added tokens and post-processor from
// tokenizer.json. Where a class's pipeline differs from what older files
// saved, the file is rewritten here so that rayo encodes as transformers does.
// Classes whose pipeline equals the saved one (Qwen2Tokenizer, the plain
// PreTrainedTokenizerFast of Llama 3) need nothing.

type Config = Readonly<Record<string, unknown>>;

/**
 * The decoder of a SentencePiece-style BPE: `▁` back to spaces, `<0xXX>`
 * byte pieces to bytes, and, where a space was put before the text, that
 * one leading space stripped.
 */
export function sentencePieceDecoder(prefixSpace: boolean): Readonly<Record<string, unknown>> {
  return {
    type: 'Sequence',
    decoders: [
      { type: 'Replace', pattern: { String: '▁' }, content: ' ' },
      { type: 'ByteFallback' },
      { type: 'Fuse' },
      ...(prefixSpace ? [{ type: 'Strip', content: ' ', start: 1, stop: 0 }] : []),
    ],
  };
}

/**
 * LlamaTokenizer (Llama 2, Mistral, TinyLlama): no normalizer; a Metaspace
 * pre-tokenizer that puts `▁` before the first piece only (`legacy: false`,
 * the default) or before every piece between special tokens
 * (`legacy: true`), never when `add_prefix_space` is false; the SentencePiece
 * decoder; BPE with byte fallback. Older files instead prepend `▁` in a
 * normalizer, which differs on text that starts with a space and on text
 * right after a special token.
 */
function llamaPipeline(json: TokenizerJson, config: Config): TokenizerJson {
  const prefixSpace = config.add_prefix_space !== false;
  const legacy = config.legacy === true;
  const prependScheme = !prefixSpace ? 'never' : legacy ? 'always' : 'first';
  const model = json.model as Record<string, unknown>;
  return {
    ...json,
    normalizer: null,
    pre_tokenizer: { type: 'Metaspace', replacement: '▁', prepend_scheme: prependScheme, split: false },
    decoder: sentencePieceDecoder(prefixSpace),
    model: { ...model, fuse_unk: true, byte_fallback: true },
  };
}

const CLASS_PIPELINES: Readonly<Record<string, (json: TokenizerJson, config: Config) => TokenizerJson>> = {
  LlamaTokenizer: llamaPipeline,
  LlamaTokenizerFast: llamaPipeline,
};

/**
 * The tokenizer.json transformers 5 would run for `config.tokenizer_class`:
 * the file as saved unless the class defines its own pipeline.
 */
export function pipelineOfTokenizerClass(json: TokenizerJson, config: Config): TokenizerJson {
  const name = config.tokenizer_class;
  const model = json.model as { type?: unknown } | undefined;
  if (typeof name !== 'string' || model?.type !== 'BPE') return json;
  const pipeline = CLASS_PIPELINES[name];
  return pipeline ? pipeline(json, config) : json;
}
