import { Tokenizer as HfTokenizer } from '@huggingface/tokenizers';
import { InvalidArgumentError } from '@rayo/core';
import { GgufFile, type GgufMetadata, openNodeFile } from '@rayo/train';
import { type ChatMessage, ChatTemplate, type ChatTemplateOptions } from '../chat/chatTemplate.js';
import { ggufTokenizerSource } from '../gguf/ggufTokenizer.js';
import { TextStream, type TextStreamOptions } from '../stream/textStream.js';
import { PACKED_BPE } from './bpeModel.js';
import {
  type BpeTables,
  buildBpeTables,
  buildBpeTablesInSteps,
  builtFrom,
  installBpeTables,
  plainBpeModel,
  withoutBpeTables,
} from './bpeTables.js';
import { readHuggingFaceTokenizer } from './huggingFaceFolder.js';
import { pipelineOfTokenizerClass } from './tokenizerClasses.js';
import { parseTokenizerConfig, type TokenizerSettings } from './tokenizerConfig.js';
import type { DecodeOptions, TokenizerJson, TokenizerSource } from './tokenizerSource.js';

export type { DecodeOptions, TokenizerJson, TokenizerSource } from './tokenizerSource.js';

export interface EncodeOptions {
  /**
   * Adds the special tokens the tokenizer adds around a text (the BOS token
   * of Llama-family tokenizers), as `add_special_tokens` in transformers.
   * Default true. Special tokens written in the text are always recognised.
   */
  readonly addSpecialTokens?: boolean;
}

const KERNEL = 'Tokenizer';

interface AddedTokenJson {
  readonly id: number;
  readonly content: string;
  readonly special?: boolean;
}

function addedTokensOf(name: string, json: TokenizerJson): AddedTokenJson[] {
  const added = json.added_tokens ?? [];
  if (!Array.isArray(added)) {
    throw new InvalidArgumentError(`${name}: 'added_tokens' is not a list`, {
      operation: KERNEL,
      argument: `${name}: added_tokens`,
      expected: 'a list of { id, content, special }',
      actual: typeof added,
    });
  }
  return added as AddedTokenJson[];
}

function checkTokenizerJson(name: string, json: TokenizerJson): void {
  const model = json.model as { type?: unknown; vocab?: unknown; [PACKED_BPE]?: unknown } | undefined;
  // A packed vocabulary (a GGUF file's) is not made here only to be looked at.
  if (typeof model === 'object' && model !== null && model[PACKED_BPE] !== undefined) return;
  if (typeof model !== 'object' || model === null || typeof model.vocab !== 'object') {
    throw new InvalidArgumentError(`${name} has no model vocabulary`, {
      operation: KERNEL,
      argument: `${name}: model`,
      expected: 'a tokenizers model with a vocab (BPE, Unigram, WordPiece)',
      actual: model === undefined ? 'absent' : JSON.stringify(model).slice(0, 80),
    });
  }
}

/**
 * Text to token ids and back, for one model's vocabulary: a Hugging Face
 * `tokenizer.json` (with its `tokenizer_config.json`) or a vocabulary built
 * from GGUF metadata, run by `@huggingface/tokenizers`. BOS and EOS come
 * from the config; `add_bos_token` / `add_eos_token`, where the config sets
 * them, decide whether `encode` adds them, as transformers does.
 */
export class Tokenizer {
  /** Names the files this tokenizer came from, for messages. */
  readonly name: string;
  /** Ids run from 0 to `vocabSize − 1` (added tokens included). */
  readonly vocabSize: number;
  readonly bosToken: string | undefined;
  readonly bosTokenId: number | undefined;
  readonly eosToken: string | undefined;
  /** The EOS token's id first, then any other id that ends a sequence (GGUF's end of turn). */
  readonly eosTokenIds: readonly number[];
  /** Ids of the special added tokens (BOS, EOS, chat markers, reserved tokens). */
  readonly specialTokenIds: ReadonlySet<number>;
  /** Chat templates by name (`default` for the unnamed one); empty when the model has none. */
  readonly chatTemplates: ReadonlyMap<string, string>;
  readonly #hf: HfTokenizer;
  readonly #settings: TokenizerSettings;
  readonly #templates = new Map<string, ChatTemplate>();
  /** The ids `encode` puts before and after a text's own when it adds special tokens. */
  readonly #prefix: readonly number[];
  readonly #suffix: readonly number[];

  /**
   * @param tables Internal: the BPE tables of `source`'s model built ahead
   * (`Tokenizer.create`); built here where absent.
   */
  constructor(source: TokenizerSource, tables?: BpeTables) {
    const { name, tokenizer } = source;
    checkTokenizerJson(name, tokenizer);
    const config = source.config ?? {};
    this.name = name;
    this.#settings = parseTokenizerConfig(name.replace(/tokenizer\.json$/, 'tokenizer_config.json'), config);
    /** The vocabulary's largest id, where the BPE tables built here found it. */
    let vocabTop: number | undefined;
    try {
      // The library's clean-up default (true) is not transformers' (false): pass ours.
      // Absent pipeline steps are null in a saved tokenizer.json; the library wants them present.
      const steps = {
        normalizer: null,
        pre_tokenizer: null,
        post_processor: null,
        decoder: null,
        added_tokens: [],
      };
      const pipeline = { ...steps, ...pipelineOfTokenizerClass(tokenizer, config) };
      const settings = { ...config, clean_up_tokenization_spaces: this.#settings.cleanUpTokenizationSpaces };
      // A BPE model's tables are built here, faster than the library builds them (see bpeTables).
      const bpe = plainBpeModel(pipeline);
      const hf = new HfTokenizer(bpe ? withoutBpeTables(pipeline, bpe) : pipeline, settings);
      const built = bpe && (tables && builtFrom(tables.from, bpe) ? tables : buildBpeTables(bpe));
      const added = pipeline.added_tokens as AddedTokenJson[];
      const installed = built !== undefined && installBpeTables(hf, built, added);
      this.#hf = bpe && !installed ? new HfTokenizer(pipeline, settings) : hf;
      if (installed) vocabTop = built.topId;
    } catch (error) {
      throw new InvalidArgumentError(`${name} could not be read by the tokenizer`, {
        operation: KERNEL,
        argument: name,
        expected: 'a tokenizer.json of the Hugging Face tokenizers format',
        actual: error instanceof Error ? error.message : String(error),
        cause: error,
      });
    }
    const added = addedTokensOf(name, tokenizer);
    let top = vocabTop ?? -1;
    if (vocabTop === undefined) {
      const vocab = (tokenizer.model as { vocab: Record<string, number> | readonly unknown[] }).vocab;
      if (Array.isArray(vocab)) top = vocab.length - 1;
      // for-in rather than Object.values: a 128k-token vocabulary's values are not copied out.
      else for (const token in vocab) top = Math.max(top, (vocab as Record<string, number>)[token]!);
    }
    for (const t of added) top = Math.max(top, t.id);
    this.vocabSize = top + 1;
    this.specialTokenIds = new Set(added.filter((t) => t.special).map((t) => t.id));
    const idOf = (field: string, token: string | undefined): number | undefined => {
      if (token === undefined) return undefined;
      const id = this.#hf.token_to_id(token);
      if (id === undefined) {
        throw new InvalidArgumentError(`the ${field} is not in the vocabulary`, {
          operation: KERNEL,
          argument: `${name}: ${field}`,
          expected: 'a token of the vocabulary',
          actual: JSON.stringify(token),
        });
      }
      return id;
    };
    this.bosToken = this.#settings.bosToken;
    this.bosTokenId = idOf('bos_token', this.bosToken);
    this.eosToken = this.#settings.eosToken;
    const eos = idOf('eos_token', this.eosToken);
    this.eosTokenIds = [
      ...new Set([...(eos === undefined ? [] : [eos]), ...(source.extraEosTokenIds ?? [])]),
    ];
    [this.#prefix, this.#suffix] = this.#specialEnds();
    const templates = new Map(source.chatTemplates ?? []);
    // tokenizer_config.json's own templates win over the files beside it, as in transformers.
    for (const [key, template] of this.#settings.chatTemplates) templates.set(key, template);
    this.chatTemplates = templates;
  }

  /**
   * Loads a tokenizer in Node: from a Hugging Face model folder
   * (`tokenizer.json`, `tokenizer_config.json`, chat templates) or from the
   * metadata of a `.gguf` file (only its header is read).
   */
  static async load(path: string): Promise<Tokenizer> {
    if (path.endsWith('.gguf')) {
      const file = await GgufFile.open(await openNodeFile(path));
      try {
        return Tokenizer.fromGguf(file.metadata, path);
      } finally {
        await file.close();
      }
    }
    return new Tokenizer(await readHuggingFaceTokenizer(path));
  }

  /**
   * The tokenizer of `source`, as the constructor makes it, with its BPE
   * tables (a large vocabulary's: Llama 3's 128k tokens and 280k merges)
   * built in steps that let the event loop's other tasks run between them:
   * a model's weights are read and uploaded meanwhile (`TextModel.load`).
   */
  static async create(source: TokenizerSource): Promise<Tokenizer> {
    const bpe = plainBpeModel(source.tokenizer);
    return new Tokenizer(source, bpe && (await buildBpeTablesInSteps(bpe)));
  }

  /** The tokenizer of a GGUF file's metadata (`name` names the file in errors). */
  static fromGguf(metadata: GgufMetadata, name = 'model.gguf'): Tokenizer {
    return new Tokenizer(ggufTokenizerSource(metadata, name));
  }

  /**
   * What the post-processor adds around a text (BOS, EOS, CLS/SEP: fixed
   * ids, whatever the text), found by encoding a probe both ways, then made
   * to follow `add_bos_token` / `add_eos_token` where the config sets them,
   * as transformers does.
   */
  #specialEnds(): [number[], number[]] {
    let prefix: number[] = [];
    let suffix: number[] = [];
    for (const probe of ['a', '0', 'x', '.', ' ']) {
      const plain: number[] = this.#hf.encode(probe, { add_special_tokens: false }).ids;
      if (plain.length === 0) continue;
      const full: number[] = this.#hf.encode(probe, { add_special_tokens: true }).ids;
      const at = full.findIndex((_, i) => plain.every((id, j) => full[i + j] === id));
      if (at < 0) continue;
      prefix = full.slice(0, at);
      suffix = full.slice(at + plain.length);
      break;
    }
    const { addBosToken, addEosToken } = this.#settings;
    const bos = this.bosTokenId;
    if (bos !== undefined && addBosToken !== undefined) {
      if (addBosToken && prefix[0] !== bos) prefix.unshift(bos);
      if (!addBosToken && prefix[0] === bos) prefix.shift();
    }
    const eos = this.eosTokenIds[0];
    if (eos !== undefined && addEosToken !== undefined) {
      if (addEosToken && suffix.at(-1) !== eos) suffix.push(eos);
      if (!addEosToken && suffix.at(-1) === eos) suffix.pop();
    }
    return [prefix, suffix];
  }

  /** The id of a token string (added tokens included), or undefined. */
  tokenToId(token: string): number | undefined {
    return this.#hf.token_to_id(token);
  }

  /** The token string of an id, or undefined outside the vocabulary. */
  idToToken(id: number): string | undefined {
    return this.#hf.id_to_token(id);
  }

  /** Token ids of `text`. */
  encode(text: string, options: EncodeOptions = {}): number[] {
    if (typeof text !== 'string') {
      throw new InvalidArgumentError('text must be a string', {
        operation: 'Tokenizer.encode',
        argument: 'text',
        expected: 'a string',
        actual: typeof text,
      });
    }
    const plain = this.#hf.encode(text, { add_special_tokens: false }).ids;
    if (!(options.addSpecialTokens ?? true)) return plain;
    return [...this.#prefix, ...plain, ...this.#suffix];
  }

  /** The text of `ids` (every id checked against the vocabulary). */
  decode(ids: readonly number[], options: DecodeOptions = {}): string {
    this.checkIds('Tokenizer.decode', ids);
    if (ids.length === 0) return '';
    return this.#hf.decode([...ids], {
      skip_special_tokens: options.skipSpecialTokens ?? false,
      // transformers 5 leaves the spaces as they are whatever the config says
      // (measured against AutoTokenizer on Llama 3's config, which sets it): so does rayo, unless asked.
      clean_up_tokenization_spaces: options.cleanUpTokenizationSpaces ?? false,
    });
  }

  /** Throws an InvalidArgumentError naming the first id that is not in the vocabulary. */
  checkIds(kernel: string, ids: readonly number[]): void {
    for (let i = 0; i < ids.length; i++) {
      const id = ids[i]!;
      if (!Number.isInteger(id) || id < 0 || id >= this.vocabSize) {
        throw new InvalidArgumentError('a token id is outside the vocabulary', {
          operation: kernel,
          argument: `ids[${i}]`,
          expected: `an integer in [0, ${this.vocabSize})`,
          actual: String(id),
        });
      }
    }
  }

  /**
   * A detokenizer fed one id at a time that returns text deltas and never
   * splits a UTF-8 character (see `TextStream`).
   */
  decodeStream(options: TextStreamOptions = {}): TextStream {
    return new TextStream(this, options);
  }

  /** Whether the model has a chat template (of `name`, default `default`). */
  hasChatTemplate(name = 'default'): boolean {
    return this.chatTemplates.has(name);
  }

  /**
   * Renders `messages` with the model's chat template (`@huggingface/jinja`),
   * with `bos_token`, `eos_token` and `add_generation_prompt`. A model
   * without one is an InvalidArgumentError that says so.
   */
  applyChatTemplate(messages: readonly ChatMessage[], options: ChatTemplateOptions = {}): string {
    const name = options.templateName ?? 'default';
    let template = this.#templates.get(name);
    if (!template) {
      const source = this.chatTemplates.get(name);
      if (source === undefined) {
        const known = [...this.chatTemplates.keys()];
        throw new InvalidArgumentError(
          known.length === 0
            ? `${this.name}: the model has no chat template, so messages cannot be rendered; pass a plain prompt`
            : `${this.name}: the model has no chat template named '${name}'`,
          {
            operation: 'applyChatTemplate',
            argument: 'messages',
            expected:
              known.length === 0
                ? "a chat_template in tokenizer_config.json (or chat_template.jinja), or GGUF 'tokenizer.chat_template'"
                : known.map((k) => `'${k}'`).join(' | '),
            actual: known.length === 0 ? 'no template' : `'${name}'`,
          },
        );
      }
      template = new ChatTemplate(
        source,
        `${this.name}: chat_template${name === 'default' ? '' : ` '${name}'`}`,
      );
      this.#templates.set(name, template);
    }
    return template.render(messages, {
      ...options,
      bosToken: options.bosToken ?? this.bosToken ?? '',
      eosToken: options.eosToken ?? this.eosToken ?? '',
    });
  }
}
