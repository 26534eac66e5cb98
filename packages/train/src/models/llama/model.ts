import {
  type Backend,
  copyRows,
  type DevicePosition,
  InvalidArgumentError,
  type KernelRunner,
  type QuantActivations,
  RayoError,
  type Tensor,
  TrackingRunner,
} from '@rayo/core';
import { checkIntegerAtLeast } from '../../integerOption.js';
import { Rng } from '../../random.js';
import { checkSamplingOptions, sampleToken } from '../sampling.js';
import type { LlamaConfig } from './config.js';
import { createLlamaDecoder, disposeLlamaDecoder, type LlamaDecoder } from './decoder.js';
import { type DecodeStrategy, EagerDecoding, lastRow, ReplayedDecoding } from './decoding.js';
import { forward } from './forward.js';
import { GreedyOnDevice } from './greedyOnDevice.js';
import { loadLlamaCheckpoint } from './loadCheckpoint.js';
import type { GenerateOptions, LlamaLoadOptions, LlamaModelOptions } from './modelOptions.js';
import { type PagedCacheOptions, PagedLlama } from './paged/pagedLlama.js';
import type { LlamaQuantizationReport } from './quantizedLayers.js';
import type { DecodeTarget } from './recordedStep.js';
import type { LlamaWeightDType, LlamaWeights } from './weights.js';

/** Prompt tokens per prefill forward pass unless the `prefillChunk` option says otherwise. */
const DEFAULT_PREFILL_CHUNK = 2048;

/**
 * A Llama-family decoder (RMSNorm, RoPE, grouped-query attention, SwiGLU,
 * tied or untied head) on any backend, with a KV cache: its lifecycle, its
 * position in the context, and `generate`. `prefill` runs tokens in chunks
 * of `prefillChunk`, each with matrix products over its tokens and causal
 * attention over the cache; `step` is one
 * decode step, a single function of the runner and the position (see the
 * README on replay). The forward pass itself is `forward.ts`; how tokens
 * after the first are decoded is a strategy chosen here once (`decoding.ts`,
 * `greedyOnDevice.ts`).
 */
export class LlamaModel {
  readonly backend: Backend;
  readonly config: LlamaConfig;
  readonly maxSequence: number;
  readonly weights: LlamaWeights;
  /** The dtype of the matrix weights and the embedding (norm weights are f32). */
  readonly weightDtype: LlamaWeightDType;
  /** The dtype of the KV cache. */
  readonly kvCacheDtype: LlamaWeightDType;
  /** How quantized projections take their activations (`LlamaModelOptions.quantizedActivations`). */
  readonly quantizedActivations: QuantActivations;
  /** i32 [1]: the token a decode step embeds. The host writes it; the step reads it on the device. */
  readonly tokenInput: Tensor;
  /** i32 [1]: the cache row of a recorded step's token (RoPE's position, the scatter's row). */
  readonly positionInput: Tensor;
  /** i32 [1]: the rows a recorded step attends over (position + 1). */
  readonly lengthInput: Tensor;
  /** What quantizing the projections cost in accuracy and saved in bytes; absent for a dense model. */
  readonly quantization: LlamaQuantizationReport | undefined;
  /** Most tokens one prefill forward pass takes (the `prefillChunk` option). */
  readonly prefillChunk: number;
  readonly #decoder: LlamaDecoder;
  /** Sampled decoding, and greedy decoding (the same strategy where the device cannot pick). */
  readonly #sampled: DecodeStrategy;
  readonly #greedy: DecodeStrategy;
  #position = 0;
  /** `DecodeTarget.positionOnDevice`. */
  #positionOnDevice: number | undefined;
  #generating = false;
  #disposed = false;

  constructor(backend: Backend, config: LlamaConfig, weights: LlamaWeights, options: LlamaModelOptions = {}) {
    const prefillChunk = options.prefillChunk ?? DEFAULT_PREFILL_CHUNK;
    checkIntegerAtLeast(
      'LlamaModel',
      'prefillChunk',
      prefillChunk,
      1,
      'prefillChunk must be a positive integer',
    );
    const decoder = createLlamaDecoder(backend, config, weights, options);
    this.#decoder = decoder;
    this.backend = backend;
    this.config = config;
    this.weights = weights;
    this.maxSequence = decoder.maxSequence;
    this.weightDtype = decoder.weightDtype;
    this.kvCacheDtype = decoder.kvCacheDtype;
    this.quantizedActivations = decoder.quantizedActivations;
    this.tokenInput = decoder.tokenInput;
    this.positionInput = decoder.positionInput;
    this.lengthInput = decoder.lengthInput;
    this.quantization = options.quantized?.report;
    this.prefillChunk = prefillChunk;
    const target = this.#decodeTarget();
    const replay = options.replay ?? true;
    this.#sampled = replay ? new ReplayedDecoding(target) : new EagerDecoding(target);
    this.#greedy = replay && backend.supports('argmax') ? new GreedyOnDevice(target) : this.#sampled;
  }

  /**
   * Loads a Hugging Face Llama checkpoint directory onto `backend`, tensor by
   * tensor, in `weightDtype` (default: the checkpoint's). A backend that
   * cannot run the model's kernels in that dtype (or in `kvCacheDtype`) is
   * refused before any weight is read.
   */
  static load(backend: Backend, dir: string, options: LlamaLoadOptions = {}): Promise<LlamaModel> {
    return loadLlamaCheckpoint(backend, dir, options, (config, weights, modelOptions) => {
      return new LlamaModel(backend, config, weights, modelOptions);
    });
  }

  /** Tokens in the cache: the position of the next token. */
  get position(): number {
    return this.#position;
  }

  /** Forgets the context (the cache rows are overwritten as new tokens come). */
  reset(): void {
    this.#position = 0;
  }

  #checkAlive(api: string): void {
    if (this.#disposed) {
      throw new RayoError('model was disposed', {
        operation: api,
        expected: 'a live model',
        actual: 'disposed',
      });
    }
  }

  #checkTokens(api: string, tokens: readonly number[]): void {
    this.#checkAlive(api);
    const vocab = this.config.vocabSize;
    const bad = tokens.findIndex((t) => !Number.isInteger(t) || t < 0 || t >= vocab);
    if (tokens.length === 0 || bad >= 0) {
      throw new InvalidArgumentError('token ids must be integers in [0, vocab_size)', {
        operation: api,
        argument: 'tokens',
        expected: `at least one id in [0, ${vocab})`,
        actual: tokens.length === 0 ? 'no tokens' : `${tokens[bad]} at index ${bad}`,
      });
    }
  }

  /** Checks the ids, and that `tokens` fit in the cache after the current position. */
  #checkChunk(api: string, tokens: readonly number[]): void {
    this.#checkTokens(api, tokens);
    if (this.#position + tokens.length > this.maxSequence) {
      throw new InvalidArgumentError('the context is full', {
        operation: api,
        argument: 'tokens',
        expected: `at most ${this.maxSequence - this.#position} more tokens (maxSequence ${this.maxSequence})`,
        actual: `${tokens.length} at position ${this.#position}`,
      });
    }
  }

  /** What the decode strategies drive: the model's steps and its position. */
  #decodeTarget(): DecodeTarget {
    const model = this;
    return {
      backend: this.backend,
      vocabSize: this.config.vocabSize,
      tokenInput: this.tokenInput,
      positionInput: this.positionInput,
      lengthInput: this.lengthInput,
      get position() {
        return model.#position;
      },
      get positionOnDevice() {
        return model.#positionOnDevice;
      },
      set positionOnDevice(value) {
        model.#positionOnDevice = value;
      },
      advance: (rows) => {
        this.#position += rows;
      },
      checkNext: (token) => this.#checkChunk('decode', [token]),
      writeToken: (token) => this.writeToken(token),
      recordStep: (runner, made, token) => this.recordStep(runner, made, token),
      decode: (token) => this.decode(token),
    };
  }

  /**
   * Runs `tokens` from the current position (a prompt, or any chunk): one
   * matrix product per weight over the tokens of a chunk (`prefillChunk` of
   * them at most), and causal attention over the cache. Returns the logits
   * [T, vocab] (the caller disposes them), or with `lastRows` only those of
   * the last rows [lastRows, vocab]: the head then runs on the chunks that
   * hold them (and on each earlier chunk's last row, as generation does), so
   * a long prompt needs no [T, vocab] of logits (16.8 GB in f32 for 32,768
   * tokens of a 128,256-word vocabulary).
   */
  prefill(tokens: readonly number[], options: { readonly lastRows?: number } = {}): Tensor {
    this.#checkChunk('prefill', tokens);
    const t = tokens.length;
    const rows = options.lastRows ?? t;
    if (!Number.isInteger(rows) || rows < 1 || rows > t) {
      throw new InvalidArgumentError('lastRows must be an integer from 1 to the number of tokens', {
        operation: 'prefill',
        argument: 'options.lastRows',
        expected: `an integer in [1, ${t}]`,
        actual: String(options.lastRows),
      });
    }
    const first = t - rows;
    const vocab = this.config.vocabSize;
    if (t <= this.prefillChunk) return this.#forwardChunk(tokens, rows);
    let logits: Tensor | undefined;
    try {
      for (let start = 0; start < t; start += this.prefillChunk) {
        const end = Math.min(start + this.prefillChunk, t);
        // The head on the chunk's rows from `first` on (on its last row where it has none of them).
        const from = Math.max(start, first);
        using part = this.#forwardChunk(tokens.slice(start, end), Math.max(end - from, 1));
        if (end <= first) continue;
        logits ??= this.backend.zeros([rows, vocab], part.dtype);
        // copyRows moves bytes (one device copy on cuda): no kernel's element count limits the logits.
        this.backend.run(copyRows, [logits, part], { row: from - first });
      }
      return logits!;
    } catch (error) {
      logits?.dispose();
      throw error;
    }
  }

  /**
   * `prefill` for generation: the same chunks, but the head runs on each
   * chunk's last token only. Returns the logits [1, vocab] of the last token.
   */
  #prefillLast(tokens: readonly number[]): Tensor {
    this.#checkChunk('prefill', tokens);
    let start = 0;
    for (; start + this.prefillChunk < tokens.length; start += this.prefillChunk) {
      this.#forwardChunk(tokens.slice(start, start + this.prefillChunk), 1).dispose();
    }
    return this.#forwardChunk(tokens.slice(start), 1);
  }

  /**
   * One forward pass of `tokens` at the current position, which it advances;
   * its intermediates freed. The logits of the last `headRows` tokens (all without it).
   */
  #forwardChunk(tokens: readonly number[], headRows?: number): Tensor {
    const scratch = new TrackingRunner(this.backend);
    try {
      using ids = this.backend.upload(Int32Array.from(tokens), [tokens.length], 'i32');
      const logits = scratch.keep(forward(this.#decoder, scratch, ids, this.#position, true, headRows));
      this.#position += tokens.length;
      return logits;
    } finally {
      scratch.dispose();
    }
  }

  /** Writes the token id the next `step` embeds into `tokenInput`, on the device. */
  writeToken(token: number): void {
    this.#checkTokens('writeToken', [token]);
    this.backend.write(this.tokenInput, Int32Array.of(token));
  }

  /** Writes `token` and runs `step` eagerly at the current position: the logits [1, vocab] of the next token. */
  decode(token: number): Tensor {
    this.#checkChunk('decode', [token]);
    this.writeToken(token);
    const made: Tensor[] = [];
    try {
      const logits = this.step(this.backend, this.#position, made);
      made.splice(made.indexOf(logits), 1);
      this.#position++;
      return logits;
    } finally {
      for (const tensor of made) tensor.dispose();
    }
  }

  /**
   * One decode step, recordable into any runner: embeds the token in
   * `tokenInput`, writes its keys and values at cache row `position`, attends
   * over rows [0, position], and returns the logits [1, vocab]. Every tensor it
   * allocates (the logits included) is pushed to `made`, to be freed once the
   * work is done (or when a batch that recorded it is dropped). `position` is
   * the only per-token value passed from the host (see the README).
   */
  step(runner: KernelRunner, position: number, made: Tensor[]): Tensor {
    this.#checkAlive('step');
    if (!Number.isInteger(position) || position < 0 || position >= this.maxSequence) {
      throw new InvalidArgumentError('position must be a row of the cache', {
        operation: 'step',
        argument: 'position',
        expected: `an integer in [0, ${this.maxSequence})`,
        actual: String(position),
      });
    }
    return this.#forwardInto(runner, made, this.tokenInput, position, runner === this.backend);
  }

  /**
   * One decode step that reads its token, position and length from
   * `tokenInput`, `positionInput` and `lengthInput`: recorded once into a
   * batch, it is replayed for any token at any position by writing those
   * three tensors. Every tensor it allocates (the logits included) is pushed
   * to `made`.
   */
  recordStep(runner: KernelRunner, made: Tensor[], token: Tensor = this.tokenInput): Tensor {
    this.#checkAlive('recordStep');
    const at = { row: this.positionInput, length: this.lengthInput };
    return this.#forwardInto(runner, made, token, at, false);
  }

  /**
   * The forward pass of a chunk, recordable into any runner (a profiler's, a
   * batch): the tokens `ids` (i32 [T], on the device) at cache rows
   * `position` … `position` + T − 1, whose keys and values it writes; returns
   * the logits [T, vocab] (of the last token alone, [1, vocab], with
   * `lastRowOnly`). Every tensor it allocates (the logits included) is pushed
   * to `made`. The model's position does not move.
   */
  recordChunk(
    runner: KernelRunner,
    ids: Tensor,
    position: number,
    made: Tensor[],
    lastRowOnly = false,
  ): Tensor {
    this.#checkAlive('recordChunk');
    const t = ids.shape[0] ?? 0;
    if (ids.dtype !== 'i32' || ids.shape.length !== 1 || t < 1) {
      throw new InvalidArgumentError('ids must be the token ids of a chunk', {
        operation: 'recordChunk',
        argument: 'ids',
        expected: 'an i32 tensor of shape [T], T >= 1',
        actual: `${ids.dtype} [${ids.shape.join(', ')}]`,
      });
    }
    if (!Number.isInteger(position) || position < 0 || position + t > this.maxSequence) {
      throw new InvalidArgumentError('the chunk must fit the cache', {
        operation: 'recordChunk',
        argument: 'position',
        expected: `an integer in [0, ${this.maxSequence - t}] for ${t} tokens`,
        actual: String(position),
      });
    }
    const run = new TrackingRunner(runner);
    try {
      return forward(this.#decoder, run, ids, position, false, lastRowOnly ? 1 : undefined);
    } finally {
      made.push(...run.release());
    }
  }

  /** The forward pass of one token into `runner`, every tensor it allocates pushed to `made`. */
  #forwardInto(
    runner: KernelRunner,
    made: Tensor[],
    token: Tensor,
    at: number | DevicePosition,
    eager: boolean,
  ): Tensor {
    const run = new TrackingRunner(runner);
    try {
      return forward(this.#decoder, run, token, at, eager);
    } finally {
      made.push(...run.release());
    }
  }

  /**
   * Generates up to `maxNewTokens` tokens after `prompt`, from an empty
   * context: a prefill of the prompt, then one decode step per token.
   * Greedy at temperature 0, otherwise sampled with the seed. Ends early at
   * a `stop` token (not yielded).
   */
  async *generate(
    prompt: readonly number[],
    options: GenerateOptions,
  ): AsyncGenerator<number, void, undefined> {
    const sampling = checkSamplingOptions(options);
    const { maxNewTokens } = options;
    checkIntegerAtLeast(
      'generate',
      'maxNewTokens',
      maxNewTokens,
      0,
      'maxNewTokens must be a non-negative integer',
    );
    // The last generated token is never fed back, so it needs no cache row.
    const rows = prompt.length + Math.max(maxNewTokens - 1, 0);
    if (rows > this.maxSequence) {
      throw new InvalidArgumentError('prompt and generated tokens do not fit in the cache', {
        operation: 'generate',
        argument: 'maxNewTokens',
        expected: `prompt (${prompt.length}) + maxNewTokens − 1 <= maxSequence (${this.maxSequence})`,
        actual: String(maxNewTokens),
      });
    }
    const stop = new Set(options.stop ?? []);
    const rng = new Rng(options.seed ?? 0);
    if (this.#generating) {
      throw new RayoError('the model is already generating', {
        operation: 'generate',
        expected: 'one generation at a time per model',
        actual: 'a second generate() before the first finished',
      });
    }
    this.#generating = true;
    // The step inputs are public: whatever wrote them since the last generation is not known here.
    this.#positionOnDevice = undefined;
    try {
      this.reset();
      this.#checkChunk('generate', prompt);
      if (maxNewTokens === 0) return;
      const pick = (logits: Float32Array) => sampleToken(logits, sampling, rng);
      const first = pick(await lastRow(this.#prefillLast(prompt), this.config.vocabSize));
      if (stop.has(first)) return;
      yield first;
      const decoding = sampling.temperature === 0 ? this.#greedy : this.#sampled;
      if (maxNewTokens > 1) yield* decoding.continue({ first, count: maxNewTokens, pick, stop });
    } finally {
      this.#generating = false;
    }
  }

  /**
   * A paged KV cache over this model's weights, for decoding many sequences
   * in one step (`PagedLlama`). The model's own cache becomes the scratch of
   * the prompts it prefills: run nothing else on the model while it is in
   * use. Dispose it before the model.
   */
  pagedCache(options: PagedCacheOptions): PagedLlama {
    this.#checkAlive('pagedCache');
    return new PagedLlama(this.#decoder, options, this.prefillChunk);
  }

  /** Frees the weights, the cache and the recorded steps. */
  dispose(): void {
    if (this.#disposed) return;
    this.#disposed = true;
    disposeLlamaDecoder(this.#decoder);
    this.#sampled.dispose();
    if (this.#greedy !== this.#sampled) this.#greedy.dispose();
  }

  [Symbol.dispose](): void {
    this.dispose();
  }
}
