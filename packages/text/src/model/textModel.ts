import { type Backend, InvalidArgumentError, type QuantActivations, RayoError } from '@rayo/core';
import {
  type LlamaLoadOptions,
  LlamaModel,
  type LlamaWeightDType,
  type LlamaWeightDTypeChoice,
  type LlamaWeightFormat,
  type LoadProgress,
  loadGgufLlama,
  type OpenFile,
  type PreparedWeights,
  repackOntoCoreFormats,
} from '@rayo/train';
import type { ChatMessage, ChatTemplateOptions } from '../chat/chatTemplate.js';
import { type GenerationDefaults, readGenerationConfig } from '../generation/generationConfig.js';
import { StopStrings } from '../generation/stopStrings.js';
import { ggufTokenizerSource } from '../gguf/ggufTokenizer.js';
import { readHuggingFaceTokenizer } from '../tokenizer/huggingFaceFolder.js';
import { Tokenizer } from '../tokenizer/tokenizer.js';
import { inspectModelFiles } from './modelFiles.js';

/** The cache length used when none is asked for: the model's context, at most this. */
export const DEFAULT_MAX_SEQUENCE = 2048;

export interface TextModelLoadOptions {
  /**
   * Rows of the KV cache: the longest prompt plus generated text. Default:
   * the model's context length, at most `DEFAULT_MAX_SEQUENCE` (2048), since
   * a cache for a 128k context rarely fits and is rarely needed.
   */
  readonly maxSequence?: number;
  /** The dtype of the matrix weights on the device (default: what the file stores). */
  readonly weightDtype?: LlamaWeightDTypeChoice;
  /**
   * The dtype of the KV cache (default: the weights' where half, f16 for a
   * GGUF file whose matrices are all quantized, else f32; where the backend runs it).
   */
  readonly kvCacheDtype?: LlamaWeightDType;
  /**
   * Quantizes the projections of a Hugging Face checkpoint on load (`q8`,
   * `q4g32`, …). A GGUF file keeps the quantization it stores (its blocks
   * go onto core's quantized formats), so this is refused for one.
   */
  readonly weightFormat?: LlamaWeightFormat;
  /**
   * How quantized projections take their activations (`LlamaModelOptions.quantizedActivations`):
   * `'int8'` (the default) lets a backend use int8 blocks of x, as llama.cpp does; `'exact'` never.
   */
  readonly quantizedActivations?: QuantActivations;
  /**
   * Called as the weights load: once with nothing loaded, then after each tensor reaches the device (the
   * loaders' `onProgress`): tensors and their stored bytes so far, of all
   * the load makes.
   */
  readonly onProgress?: (progress: LoadProgress) => void;
  /**
   * How the model's files are opened (default: Node's file system). With
   * `urlFileOpener()` from `@rayo/train`, `path` is a URL: a folder of
   * Hugging Face files (`…/config.json`, `…/model.safetensors`, …) or a
   * `.gguf` file, read by HTTP range requests; a browser cache (such as
   * `@rayo/web`'s) is another opener.
   */
  readonly openFile?: OpenFile;
  /** `LlamaLoadOptions.fuseQkv`: false keeps each layer's q, k and v apart. */
  readonly fuseQkv?: boolean;
  /**
   * A GGUF file only: where its quantized tensors are kept in their device
   * layout between loads (`loadGgufLlama`'s `prepared`; `@rayo/web`'s model
   * cache keeps them beside the cached file).
   */
  readonly prepared?: PreparedWeights;
}

export interface GenerateTextOptions extends Pick<ChatTemplateOptions, 'templateName' | 'variables'> {
  /**
   * Most tokens to generate. Default: `max_new_tokens` (or `max_length`) of
   * generation_config.json, else 256; a default never runs past the cache
   * (`maxSequence`), an explicit value that does is an error.
   */
  readonly maxNewTokens?: number;
  /** 0 is greedy. Default: generation_config.json's (greedy unless `do_sample`). */
  readonly temperature?: number;
  readonly topK?: number;
  readonly topP?: number;
  /** Seed of the sampler (default 0). */
  readonly seed?: number;
  /** Strings that end the text; the text stops before the first one. */
  readonly stop?: readonly string[];
  /** Token ids that end generation, beside the model's EOS ids. */
  readonly stopTokenIds?: readonly number[];
  /** Aborts between tokens: the iteration then throws the signal's reason. */
  readonly signal?: AbortSignal;
}

/** Why a generation ended. */
export type FinishReason = 'eos' | 'stop' | 'length' | 'aborted';

/** What one `generateText` call did, once its iteration has ended. */
export interface GenerationStats {
  readonly promptTokens: number;
  readonly generatedTokens: number;
  /** From the call to the first generated token (prefill included), in ms. */
  readonly timeToFirstTokenMs: number;
  /** Tokens after the first, per second of decoding after it (0 for fewer than two tokens). */
  readonly tokensPerSecond: number;
  readonly totalMs: number;
  readonly finishReason: FinishReason;
}

/**
 * The text deltas of one generation (iterate once); `stats` and `text`
 * are complete once the iteration ends.
 */
export interface TextGeneration extends AsyncIterable<string> {
  /** The prompt's token ids (after the chat template, when messages were given). */
  readonly promptIds: readonly number[];
  /** The text so far (all of it, once the iteration has ended). */
  readonly text: string;
  /** Undefined until the iteration ends (normally, at a stop, or aborted). */
  readonly stats: GenerationStats | undefined;
}

const DEFAULT_MAX_NEW_TOKENS = 256;

function checkMaxSequence(value: number | undefined): void {
  if (value !== undefined && (!Number.isInteger(value) || value < 1)) {
    throw new InvalidArgumentError('maxSequence must be a positive integer', {
      operation: 'TextModel.load',
      argument: 'maxSequence',
      expected: 'an integer >= 1',
      actual: String(value),
    });
  }
}

/**
 * A decoder with its tokenizer: text (or chat messages) in, text deltas out.
 * `TextModel.load` reads a Hugging Face model folder (`config.json`,
 * safetensors, `tokenizer.json`, `tokenizer_config.json`,
 * `generation_config.json`) or a GGUF file (weights, vocabulary and chat
 * template in one). The token-level model stays available as `model`.
 */
export class TextModel {
  readonly tokenizer: Tokenizer;
  readonly model: LlamaModel;
  /** generation_config.json's defaults (GGUF: none beyond the vocabulary's EOS). */
  readonly generationDefaults: GenerationDefaults;
  /** The folder or file the model came from. */
  readonly path: string;
  #generating = false;

  constructor(tokenizer: Tokenizer, model: LlamaModel, generationDefaults: GenerationDefaults, path = '') {
    if (tokenizer.vocabSize > model.config.vocabSize) {
      throw new InvalidArgumentError('the tokenizer has more tokens than the model embeds', {
        operation: 'TextModel',
        argument: tokenizer.name,
        expected: `at most ${model.config.vocabSize} tokens (vocab_size of the model)`,
        actual: `${tokenizer.vocabSize}`,
      });
    }
    this.tokenizer = tokenizer;
    this.model = model;
    this.generationDefaults = generationDefaults;
    this.path = path;
  }

  /**
   * Loads a model folder or `.gguf` file (or a URL of either, with a URL
   * `openFile`) onto `backend`: the tokenizer's files first (a missing
   * `tokenizer.json` fails before any weight is read), then the weights
   * through `LlamaModel.load` or `loadGgufLlama` (whose errors, such as an
   * unsupported model family, pass through) while the tokenizer's tables are
   * built in steps (`Tokenizer.create`).
   */
  static async load(backend: Backend, path: string, options: TextModelLoadOptions = {}): Promise<TextModel> {
    checkMaxSequence(options.maxSequence);
    const openFile = options.openFile;
    const files = await inspectModelFiles(path, openFile);
    if (files.kind === 'gguf' && options.weightFormat !== undefined) {
      throw new InvalidArgumentError('a GGUF file keeps the quantization it stores', {
        operation: 'TextModel.load',
        argument: 'weightFormat',
        expected: 'absent for a .gguf file (its quantized blocks are used as they are)',
        actual: `'${options.weightFormat}'`,
      });
    }
    if (files.kind !== 'gguf' && options.prepared !== undefined) {
      throw new InvalidArgumentError('prepared weights are kept for GGUF files only', {
        operation: 'TextModel.load',
        argument: 'prepared',
        expected: 'absent for a Hugging Face folder',
        actual: 'a PreparedWeights store',
      });
    }
    const tokenizerSource =
      files.kind === 'gguf'
        ? ggufTokenizerSource(files.metadata, path)
        : await readHuggingFaceTokenizer(path, openFile);
    // The tokenizer's tables are built in steps while the weights are read and uploaded: the reads leave
    // the thread idle. Awaited after the weights; a failure meanwhile is not unhandled.
    const tokenizing = Tokenizer.create(tokenizerSource);
    tokenizing.catch(() => {});
    const generation = files.kind === 'huggingface' ? await readGenerationConfig(path, openFile) : undefined;
    const maxSequence =
      options.maxSequence ?? Math.min(files.contextLength ?? DEFAULT_MAX_SEQUENCE, DEFAULT_MAX_SEQUENCE);
    const common = {
      maxSequence,
      ...(options.onProgress ? { onProgress: options.onProgress } : {}),
      ...(options.weightDtype !== undefined ? { weightDtype: options.weightDtype } : {}),
      ...(options.kvCacheDtype !== undefined ? { kvCacheDtype: options.kvCacheDtype } : {}),
      ...(openFile !== undefined ? { openFile } : {}),
      ...(options.fuseQkv !== undefined ? { fuseQkv: options.fuseQkv } : {}),
      ...(options.quantizedActivations !== undefined
        ? { quantizedActivations: options.quantizedActivations }
        : {}),
    };
    let model: LlamaModel;
    if (files.kind === 'gguf') {
      model = await loadGgufLlama(backend, path, {
        ...common,
        repack: repackOntoCoreFormats,
        header: files.header,
        ...(options.prepared ? { prepared: options.prepared } : {}),
      });
    } else {
      const llamaOptions: LlamaLoadOptions = {
        ...common,
        ...(options.weightFormat !== undefined ? { weightFormat: options.weightFormat } : {}),
      };
      model = await LlamaModel.load(backend, path, llamaOptions);
    }
    try {
      return new TextModel(await tokenizing, model, generation ?? { eosTokenIds: [], notApplied: {} }, path);
    } catch (error) {
      model.dispose();
      throw error;
    }
  }

  /** The prompt's token ids: a string as it is (with BOS where the tokenizer adds it), messages through the chat template. */
  encodePrompt(
    prompt: string | readonly ChatMessage[],
    options: Pick<ChatTemplateOptions, 'templateName' | 'variables'> = {},
  ): number[] {
    if (typeof prompt === 'string') return this.tokenizer.encode(prompt);
    const text = this.tokenizer.applyChatTemplate(prompt, { ...options, addGenerationPrompt: true });
    // The template writes the special tokens itself, as transformers' apply_chat_template.
    return this.tokenizer.encode(text, { addSpecialTokens: false });
  }

  /**
   * Generates text after `prompt` (a string, or chat messages rendered with
   * the model's template), streamed as deltas that never split a character.
   * Ends at an EOS id, a stop string (not included), `maxNewTokens`, or an
   * abort (the iteration then throws the signal's reason).
   */
  generateText(prompt: string | readonly ChatMessage[], options: GenerateTextOptions = {}): TextGeneration {
    const started = performance.now();
    const promptIds = this.encodePrompt(prompt, options);
    if (promptIds.length === 0) {
      throw new InvalidArgumentError('the prompt has no tokens', {
        operation: 'generateText',
        argument: 'prompt',
        expected: 'a prompt of at least one token (a tokenizer without BOS encodes an empty string to none)',
        actual: '0 tokens',
      });
    }
    const room = this.model.maxSequence - promptIds.length + 1;
    if (room < 1) {
      throw new InvalidArgumentError('the prompt does not fit in the cache', {
        operation: 'generateText',
        argument: 'prompt',
        expected: `at most maxSequence (${this.model.maxSequence}) tokens; load with a larger maxSequence`,
        actual: `${promptIds.length} tokens`,
      });
    }
    const defaults = this.generationDefaults;
    const fromConfig =
      defaults.maxNewTokens ??
      (defaults.maxLength !== undefined ? defaults.maxLength - promptIds.length : undefined);
    const maxNewTokens =
      options.maxNewTokens ?? Math.max(0, Math.min(fromConfig ?? DEFAULT_MAX_NEW_TOKENS, room));
    const stopStrings = new StopStrings(options.stop ?? []);
    const stopIds = [
      ...new Set([...this.tokenizer.eosTokenIds, ...defaults.eosTokenIds, ...(options.stopTokenIds ?? [])]),
    ];
    const temperature = options.temperature ?? defaults.temperature ?? 0;
    const sampled = temperature > 0;
    const sampling = {
      temperature,
      ...(sampled && (options.topK ?? defaults.topK) !== undefined
        ? { topK: options.topK ?? defaults.topK }
        : {}),
      ...(sampled && (options.topP ?? defaults.topP) !== undefined
        ? { topP: options.topP ?? defaults.topP }
        : {}),
      ...(options.seed !== undefined ? { seed: options.seed } : {}),
    };
    const stream = this.tokenizer.decodeStream({ context: promptIds });
    const self = this;
    let stats: GenerationStats | undefined;
    let text = '';
    let iterated = false;

    async function* run(): AsyncGenerator<string, void, undefined> {
      if (self.#generating) {
        throw new RayoError('the model is already generating', {
          operation: 'generateText',
          expected: 'one generation at a time per model (finish or break out of the last one)',
          actual: 'a second generateText iterated before the first ended',
        });
      }
      self.#generating = true;
      let generated = 0;
      let firstAt: number | undefined;
      let finishReason: FinishReason = 'length';
      const finish = () => {
        const end = performance.now();
        const first = firstAt ?? end;
        stats = {
          promptTokens: promptIds.length,
          generatedTokens: generated,
          timeToFirstTokenMs: first - started,
          tokensPerSecond: generated > 1 && end > first ? ((generated - 1) * 1000) / (end - first) : 0,
          totalMs: end - started,
          finishReason,
        };
      };
      try {
        options.signal?.throwIfAborted();
        const tokens = self.model.generate(promptIds, { ...sampling, maxNewTokens, stop: stopIds });
        for await (const id of tokens) {
          generated++;
          firstAt ??= performance.now();
          const shown = stopStrings.push(stream.push(id));
          if (shown) {
            text += shown;
            yield shown;
          }
          if (stopStrings.stopped) {
            finishReason = 'stop';
            return;
          }
          if (options.signal?.aborted) {
            finishReason = 'aborted';
            options.signal.throwIfAborted();
          }
        }
        if (generated < maxNewTokens) finishReason = 'eos';
        const rest = stopStrings.push(stream.flush());
        const tail = stopStrings.stopped ? rest : rest + stopStrings.flush();
        if (stopStrings.stopped) finishReason = 'stop';
        if (tail) {
          text += tail;
          yield tail;
        }
      } finally {
        finish();
        self.#generating = false;
      }
    }

    return {
      promptIds,
      get text() {
        return text;
      },
      get stats() {
        return stats;
      },
      [Symbol.asyncIterator]() {
        if (iterated) {
          throw new RayoError('a generation is iterated once', {
            operation: 'generateText',
            expected: 'one for-await over the result',
            actual: 'a second iteration',
          });
        }
        iterated = true;
        return run();
      },
    };
  }

  /** Frees the model's weights and cache. */
  dispose(): void {
    this.model.dispose();
  }

  [Symbol.dispose](): void {
    this.dispose();
  }
}
