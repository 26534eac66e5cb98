import {
  add,
  argmax,
  type Backend,
  batchedMatmul,
  biasAdd,
  type CommandBatch,
  cast,
  embedding,
  gateUpSwiglu,
  InvalidArgumentError,
  incrementalAttention,
  type KernelRunner,
  kvCacheScatter,
  matmul,
  type QuantizedWeight,
  quantizedEmbedding,
  quantizedGateUpSwiglu,
  quantizedMatmul,
  RayoError,
  rmsNorm,
  rmsNormMatmul,
  rmsNormMatmul3,
  rope,
  ropeFrequencies,
  ropeKvScatter,
  ShapeError,
  softmax,
  swiglu,
  type Tensor,
  transpose,
  UnsupportedOnBackendError,
} from '@rayo/core';
import { Rng } from '../../random.js';
import { checkSamplingOptions, type SamplingOptions, sampleToken } from '../sampling.js';
import { ScratchRunner } from '../scratchRunner.js';
import { checkLlamaBackend, fusedDecodeSupported } from './backendDtypes.js';
import { type LlamaCheckpointOptions, openLlamaCheckpoint } from './checkpoint.js';
import { checkSlidingWindow, type LlamaConfig } from './config.js';
import type { LoadProgressCallback } from './loadProgress.js';
import { quantizedGateUpCall } from './quantizedGateUp.js';
import {
  checkWeightFormat,
  disposeQuantizedLayer,
  type LlamaQuantizationReport,
  type LlamaWeightFormat,
  type QuantizedLlamaLayer,
  quantizeLlamaLayers,
} from './quantizedLayers.js';
import {
  checkLlamaTensors,
  checkLlamaWeights,
  checkpointWeightDtype,
  type LLAMA_PROJECTIONS,
  type LlamaLayerWeights,
  type LlamaWeightDType,
  type LlamaWeightDTypeChoice,
  type LlamaWeights,
  llamaWeightTensors,
  uploadLlamaWeights,
} from './weights.js';

export interface LlamaModelOptions {
  /**
   * The dtype of the KV cache (default f32). A half cache halves what the
   * attention reads per token; queries, keys and values are computed in f32
   * and rounded once as they are written.
   */
  readonly kvCacheDtype?: LlamaWeightDType;
  /** Rows of the KV cache: the longest context (prompt + generated tokens). Default: `max_position_embeddings`. */
  readonly maxSequence?: number;
  /**
   * `generate` records one decode step into a batch once and replays it for
   * every token, writing only the token, position and length on the device
   * (default true); false runs every step eagerly.
   */
  readonly replay?: boolean;
  /**
   * Decode steps (one token) fold each RMSNorm into what follows it: the
   * attention projections and the head are `rmsNormMatmul`s, and the MLP up
   * to the down projection is one `gateUpSwiglu` (default: true where the
   * backend implements them in the weights' and the cache's dtypes). Prefill
   * keeps the unfused chain, whose products are GEMMs.
   */
  readonly fused?: boolean;
  /**
   * Every layer's projections quantized (from `quantizeLlamaLayers`, or a
   * GGUF file's quantized tensors), used in place of the dense ones in
   * `weights` (which may then be absent) for decode steps and prefill
   * alike; the model owns them from here. Quantized layers take the unfused
   * chain (the fused decode kernels read dense weights); a dense head keeps
   * its fused norm. `embedding` and `head` (a GGUF file's quantized
   * `token_embd` and `output`, [vocab, hidden]) replace the dense ones:
   * the embedding is looked up with `quantizedEmbedding` (only the rows read
   * are dequantized, on the device), the logits come from `quantizedMatmul`.
   * A tied head is the quantized embedding itself.
   */
  readonly quantized?: {
    /** Every layer's projections (absent: the dense ones in `weights`). */
    readonly layers?: readonly QuantizedLlamaLayer[];
    readonly embedding?: QuantizedWeight;
    readonly head?: QuantizedWeight;
    /** What quantizing cost; absent for weights a checkpoint stores quantized (nothing was quantized on load). */
    readonly report?: LlamaQuantizationReport;
  };
}

export interface LlamaLoadOptions extends LlamaModelOptions, LlamaCheckpointOptions {
  /**
   * The dtype of the matrix weights and the embedding on the device (norm
   * weights are f32): `'checkpoint'` (the default) keeps the dtype the
   * checkpoint stores, so a bf16 checkpoint stays bf16; `'f32'` widens a half
   * checkpoint (exactly); `'f16'` or `'bf16'` rounds an f32 checkpoint once to
   * nearest even (and converts between the half formats through f32).
   */
  readonly weightDtype?: LlamaWeightDTypeChoice;
  /**
   * Quantizes the projection weights (q, k, v, o, gate, up, down) on load:
   * `'q8'` int8 per output row, `'q4g32'` or `'q4g128'` 4 bits with a scale
   * per 32 or 128 weights. The embedding, the norms and the head stay in
   * `weightDtype`. Absent: the projections stay dense.
   */
  readonly weightFormat?: LlamaWeightFormat;
  /**
   * Quantizes the LM head in `weightFormat` too (an untied head only: a tied
   * head is the embedding, which stays dense). The quantization report then
   * covers the head with the projections.
   */
  readonly quantizeHead?: boolean;
  /** Called after each tensor is uploaded, with the tensors and stored bytes done and in all. */
  readonly onProgress?: LoadProgressCallback;
}

const FLOAT_DTYPES: readonly string[] = ['f32', 'f16', 'bf16'];

function checkDtypeOption(option: string, value: unknown, extra: readonly string[] = []): void {
  if (![...FLOAT_DTYPES, ...extra].includes(value as string)) {
    throw new InvalidArgumentError(`${option} must be a float dtype`, {
      kernel: 'LlamaModel',
      argument: option,
      expected: [...FLOAT_DTYPES, ...extra].map((d) => `'${d}'`).join(' | '),
      actual: String(value),
    });
  }
}

/**
 * Where a step's per-token values come from: numbers baked into its kernels'
 * attributes (eager), or the model's device tensors (a recorded step that is
 * replayed with new values).
 */
type StepPosition = { readonly kind: 'host'; readonly position: number } | { readonly kind: 'device' };

/**
 * Greedy decoding on the device: two recorded steps, each embedding the token
 * the other chose. Step k reads `tokens[k]` and writes its argmax into
 * `tokens[1 - k]`, so one step can run while the host reads the token of the
 * one before, which nothing in flight overwrites.
 */
interface GreedyChain {
  readonly steps: readonly [RecordedStep, RecordedStep];
  /** i32 [1] each: `tokens[0]` is the model's `tokenInput`. */
  readonly tokens: readonly [Tensor, Tensor];
}

/** A decode step recorded once: the batch, what it allocated, and its logits [1, vocab]. */
interface RecordedStep {
  readonly batch: CommandBatch;
  readonly made: Tensor[];
  readonly logits: Tensor;
  /** i32 [1]: the argmax of the logits, in the steps of greedy decoding on the device. */
  readonly greedy: Tensor | undefined;
}

export interface GenerateOptions extends SamplingOptions {
  /** Most tokens to generate (the stop token, when one comes, is not yielded). */
  readonly maxNewTokens: number;
  /** Seed of the sampler (default 0); the same seed gives the same tokens. */
  readonly seed?: number;
  /** Token ids that end generation. */
  readonly stop?: readonly number[];
}

/** Added to the scores of masked (future or unwritten) cache rows: softmax gives them 0; finite for WGSL. */
const MASKED = -1e9;

interface LayerCache {
  /** [numKeyValueHeads, maxSequence, headDim], head-first. */
  readonly k: Tensor;
  readonly v: Tensor;
}

/**
 * A Llama-family decoder (RMSNorm, RoPE, grouped-query attention, SwiGLU,
 * tied or untied head) on any backend, with a KV cache. `prefill` runs a
 * chunk of tokens with matrix products over all of them and causal
 * attention; `step` is one decode step, a single function of the runner and
 * the position (see the README on replay); `generate` does both and samples.
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
  readonly #caches: LayerCache[];
  /** i32 [1]: the token a decode step embeds. The host writes it; the step reads it on the device. */
  readonly tokenInput: Tensor;
  /** i32 [1]: the cache row of a recorded step's token (RoPE's position, the scatter's row). */
  readonly positionInput: Tensor;
  /** i32 [1]: the rows a recorded step attends over (position + 1). */
  readonly lengthInput: Tensor;
  /** f32 [headDim / 2]: RoPE's scaled frequencies (the config's `ropeScaling`); absent, the kernels use theta's. */
  readonly #frequencies: Tensor | undefined;
  readonly #replay: boolean;
  readonly #fused: boolean;
  readonly #quantized: readonly QuantizedLlamaLayer[] | undefined;
  readonly #quantizedEmbedding: QuantizedWeight | undefined;
  readonly #quantizedHead: QuantizedWeight | undefined;
  /** What quantizing the projections cost in accuracy and saved in bytes; absent for a dense model. */
  readonly quantization: LlamaQuantizationReport | undefined;
  #recorded: RecordedStep | undefined;
  #greedy: GreedyChain | undefined;
  #position = 0;
  #generating = false;
  #disposed = false;

  constructor(backend: Backend, config: LlamaConfig, weights: LlamaWeights, options: LlamaModelOptions = {}) {
    const maxSequence = options.maxSequence ?? config.maxPositionEmbeddings;
    if (!Number.isInteger(maxSequence) || maxSequence < 1) {
      throw new InvalidArgumentError('maxSequence must be a positive integer', {
        kernel: 'LlamaModel',
        argument: 'maxSequence',
        expected: 'an integer >= 1',
        actual: String(maxSequence),
      });
    }
    checkSlidingWindow(config, maxSequence);
    this.weightDtype = checkLlamaWeights(config, weights, {
      quantizedProjections: options.quantized?.layers !== undefined,
      quantizedEmbedding: options.quantized?.embedding !== undefined,
      quantizedHead: options.quantized?.head !== undefined,
    });
    const cacheDtype = options.kvCacheDtype ?? 'f32';
    checkDtypeOption('kvCacheDtype', cacheDtype);
    this.kvCacheDtype = cacheDtype;
    this.#fused = options.fused ?? fusedDecodeSupported(backend, this.weightDtype, cacheDtype);
    checkLlamaBackend(backend, this.weightDtype, cacheDtype, this.#fused);
    this.backend = backend;
    this.config = config;
    this.weights = weights;
    this.maxSequence = maxSequence;
    const cacheShape = [config.numKeyValueHeads, maxSequence, config.headDim];
    // Zeros, so that rows not yet written hold finite values under the attention mask.
    this.#caches = weights.layers.map(() => ({
      k: backend.zeros(cacheShape, cacheDtype),
      v: backend.zeros(cacheShape, cacheDtype),
    }));
    this.tokenInput = backend.zeros([1], 'i32');
    this.positionInput = backend.zeros([1], 'i32');
    this.lengthInput = backend.zeros([1], 'i32');
    const { ropeScaling } = config;
    this.#frequencies = ropeScaling
      ? backend.upload(ropeFrequencies(config.ropeTheta, config.headDim, ropeScaling), [config.headDim / 2])
      : undefined;
    this.#replay = options.replay ?? true;
    const layers = options.quantized?.layers;
    if (layers && layers.length !== weights.layers.length) {
      throw new InvalidArgumentError('one quantized layer per layer is needed', {
        kernel: 'LlamaModel',
        argument: 'quantized.layers',
        expected: `${weights.layers.length} layers`,
        actual: `${layers.length}`,
      });
    }
    const { embedding: qEmbedding, head: qHead } = options.quantized ?? {};
    if (config.tieWordEmbeddings && qHead !== undefined && qHead !== qEmbedding) {
      throw new InvalidArgumentError('a tied head must be the embedding itself', {
        kernel: 'LlamaModel',
        argument: 'quantized.head',
        expected: 'quantized.embedding (tie_word_embeddings is true)',
        actual: 'another weight',
      });
    }
    this.#quantizedEmbedding = qEmbedding;
    this.#quantizedHead = qHead ?? (config.tieWordEmbeddings ? qEmbedding : undefined);
    for (const [name, w, kernel] of [
      ['quantized.embedding', qEmbedding, quantizedEmbedding.name],
      ['quantized.head', this.#quantizedHead, quantizedMatmul.name],
    ] as const) {
      if (!w) continue;
      if (w.n !== config.vocabSize || w.k !== config.hiddenSize) {
        throw new ShapeError(`${name} does not fit the config`, {
          kernel: 'LlamaModel',
          argument: name,
          expected: `[${config.vocabSize}, ${config.hiddenSize}] (vocab_size, hidden_size)`,
          actual: `[${w.n}, ${w.k}]`,
        });
      }
      if (!backend.supports(kernel)) {
        throw new UnsupportedOnBackendError(`the ${backend.name} backend has no ${kernel}`, {
          kernel,
          argument: name,
          expected: `a backend that implements ${kernel}`,
          actual: backend.name,
        });
      }
    }
    this.#quantized = layers;
    this.quantization = options.quantized?.report;
  }

  /**
   * Loads a Hugging Face Llama checkpoint directory onto `backend`, tensor by
   * tensor, in `weightDtype` (default: the checkpoint's). A backend that
   * cannot run the model's kernels in that dtype (or in `kvCacheDtype`) is
   * refused before any weight is read.
   */
  static async load(backend: Backend, dir: string, options: LlamaLoadOptions = {}): Promise<LlamaModel> {
    const choice = options.weightDtype ?? 'checkpoint';
    checkDtypeOption('weightDtype', choice, ['checkpoint']);
    checkDtypeOption('kvCacheDtype', options.kvCacheDtype ?? 'f32');
    if (options.weightFormat !== undefined) checkWeightFormat(backend, options.weightFormat);
    const checkpoint = await openLlamaCheckpoint(dir, options);
    try {
      checkSlidingWindow(checkpoint.config, options.maxSequence ?? checkpoint.config.maxPositionEmbeddings);
      checkLlamaTensors(checkpoint.config, checkpoint.tensors);
      const dtype =
        choice === 'checkpoint' ? checkpointWeightDtype(checkpoint.config, checkpoint.tensors) : choice;
      const cacheDtype = options.kvCacheDtype ?? 'f32';
      const fused = options.fused ?? fusedDecodeSupported(backend, dtype, cacheDtype);
      checkLlamaBackend(backend, dtype, cacheDtype, fused);
      let weights = await uploadLlamaWeights(
        backend,
        checkpoint.config,
        checkpoint.tensors,
        dtype,
        options.onProgress,
      );
      let quantized: LlamaModelOptions['quantized'];
      try {
        if (options.quantizeHead && options.weightFormat === undefined) {
          throw new InvalidArgumentError('quantizeHead needs a weightFormat', {
            kernel: 'LlamaModel',
            argument: 'quantizeHead',
            expected: 'weightFormat given',
            actual: 'no weightFormat',
          });
        }
        if (options.weightFormat !== undefined) {
          quantized = await quantizeLlamaLayers(backend, weights, options.weightFormat, {
            head: options.quantizeHead === true,
          });
          // The dense head was freed as it was quantized.
          if (quantized.head) weights = { ...weights, head: undefined };
        }
        return new LlamaModel(backend, checkpoint.config, weights, { ...options, quantized });
      } catch (error) {
        for (const t of llamaWeightTensors(weights)) t.dispose();
        for (const layer of quantized?.layers ?? []) disposeQuantizedLayer(layer);
        quantized?.head?.dispose();
        throw error;
      }
    } finally {
      await checkpoint.close();
    }
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
        kernel: api,
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
        kernel: api,
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
        kernel: api,
        argument: 'tokens',
        expected: `at most ${this.maxSequence - this.#position} more tokens (maxSequence ${this.maxSequence})`,
        actual: `${tokens.length} at position ${this.#position}`,
      });
    }
  }

  /**
   * Runs `tokens` from the current position (a prompt, or any chunk): one
   * matrix product per weight over all of them, and causal attention over
   * the cache. Returns the logits [T, vocab] (the caller disposes them).
   */
  prefill(tokens: readonly number[]): Tensor {
    this.#checkChunk('prefill', tokens);
    const t = tokens.length;
    const position = this.#position;
    const scratch = new ScratchRunner(this.backend);
    try {
      using ids = this.backend.upload(Int32Array.from(tokens), [t], 'i32');
      using mask = t > 1 ? this.#causalMask(t, position) : undefined;
      const logits = scratch.keep(this.#forward(scratch, ids, { kind: 'host', position }, mask, true));
      this.#position += t;
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
        kernel: 'step',
        argument: 'position',
        expected: `an integer in [0, ${this.maxSequence})`,
        actual: String(position),
      });
    }
    const eager = runner === this.backend;
    return this.#forward(
      new ScratchRunner(runner, made),
      this.tokenInput,
      { kind: 'host', position },
      undefined,
      eager,
    );
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
    return this.#forward(new ScratchRunner(runner, made), token, { kind: 'device' }, undefined, false);
  }

  /**
   * Logits of `token` at the current position through the replayed step
   * (recorded on first use), then advances the position: four bytes each
   * of token, position and length written, one batch submitted.
   */
  async #decodeReplayed(token: number): Promise<Float32Array> {
    this.#checkChunk('decode', [token]);
    // Greedy decoding with `argmax` takes the chain of #greedyOnDevice; here the host picks from the logits.
    this.#recorded ??= this.#recordDecode(this.tokenInput);
    const position = this.#position;
    this.writeToken(token);
    this.backend.write(this.positionInput, Int32Array.of(position));
    this.backend.write(this.lengthInput, Int32Array.of(position + 1));
    const recorded = this.#recorded;
    // Reads are ordered after submitted work: waiting for the read alone
    // saves a round trip to the device per token.
    const [, logits] = await Promise.all([recorded.batch.submit(), recorded.logits.read()]);
    this.#position++;
    return logits as Float32Array;
  }

  /** Records a decode step that embeds `token`; with `chosen` it also takes the argmax of the logits into it. */
  #recordDecode(token: Tensor, chosen?: Tensor): RecordedStep {
    const batch = this.backend.batch();
    const made: Tensor[] = [];
    try {
      const logits = this.recordStep(batch, made, token);
      const greedy = chosen && batch.run(argmax, [logits], {}, { out: [chosen] })[0]!;
      return { batch, made, logits, greedy };
    } catch (error) {
      batch.dispose();
      for (const t of made) t.dispose();
      throw error;
    }
  }

  /** The two steps of greedy decoding on the device, recorded on first use. */
  #greedyChain(): GreedyChain {
    if (this.#greedy) return this.#greedy;
    const spare = this.backend.zeros([1], 'i32');
    try {
      const first = this.#recordDecode(this.tokenInput, spare);
      try {
        const second = this.#recordDecode(spare, this.tokenInput);
        this.#greedy = { steps: [first, second], tokens: [this.tokenInput, spare] };
      } catch (error) {
        disposeRecorded(first);
        throw error;
      }
    } catch (error) {
      spare.dispose();
      throw error;
    }
    return this.#greedy;
  }

  /**
   * Submits step `k` of the greedy chain at the current position (its token
   * is already on the device) and advances the position. Resolves when the
   * device finished it.
   */
  #submitGreedy(chain: GreedyChain, k: 0 | 1): Promise<void> {
    const position = this.#position;
    this.backend.write(this.positionInput, Int32Array.of(position));
    this.backend.write(this.lengthInput, Int32Array.of(position + 1));
    const submitted = chain.steps[k].batch.submit();
    this.#position++;
    return submitted;
  }

  /**
   * Greedy tokens after `first`, each step chosen and fed back on the device:
   * the step of the next token is queued before the host waits for the
   * current one, so the device does not wait for the host between tokens.
   * Yields tokens 1 … count − 1 (the caller yielded `first`); a stop token
   * ends it, and the step already queued after it is taken back from the
   * context.
   */
  async *#greedyOnDevice(first: number, count: number, stop: ReadonlySet<number>): AsyncGenerator<number> {
    const chain = this.#greedyChain();
    this.writeToken(first);
    let k: 0 | 1 = 0;
    let current: Promise<void> | undefined = this.#submitGreedy(chain, k);
    let queued: Promise<void> | undefined;
    try {
      for (let i = 1; i < count; i++) {
        // Step k writes token i into tokens[other]; the read is enqueued before the next step.
        const other: 0 | 1 = k === 0 ? 1 : 0;
        const read = chain.tokens[other].read();
        queued = i + 1 < count ? this.#submitGreedy(chain, other) : undefined;
        const [, values] = await Promise.all([current, read]);
        current = queued;
        queued = undefined;
        const token = values[0]!;
        if (stop.has(token)) return;
        yield token;
        k = other;
      }
    } finally {
      // A step queued past a stop (or an early return) ran for nothing: its cache row is not context.
      const pending = [current, queued].filter((p): p is Promise<void> => p !== undefined);
      this.#position -= pending.length;
      await Promise.allSettled(pending);
    }
  }

  /**
   * `[T, S]`: 0 where token t (at position + t) may attend to key j (j <= position + t),
   * a large negative number elsewhere. A chunk at position 0 attends to its own
   * T keys; a later one to the whole cache (S = maxSequence).
   */
  #causalMask(t: number, position: number): Tensor {
    const s = position === 0 ? t : this.maxSequence;
    const data = new Float32Array(t * s);
    for (let i = 0; i < t; i++) data.fill(MASKED, i * s + position + i + 1, (i + 1) * s);
    return this.backend.upload(data, [t, s]);
  }

  /**
   * Logits [T, vocab] of tokens `ids` [T] at `position`; `mask` is required
   * for T > 1. `eager` (kernels enqueued as they come, not recorded) frees
   * each layer's intermediates after the layer, so that the memory a long
   * prefill needs is one layer's, not all of them.
   */
  #forward(
    run: ScratchRunner,
    ids: Tensor,
    position: StepPosition,
    mask: Tensor | undefined,
    eager: boolean,
  ): Tensor {
    const { weights } = this;
    const table = this.#quantizedEmbedding;
    let x = table
      ? run.run1(quantizedEmbedding, [ids, table.packed, table.scales, table.zeros, table.offsets], {
          format: table.format,
          dim: this.config.hiddenSize,
        })
      : run.run1(embedding, [weights.embedding!, ids]);
    // Activations are f32 whatever the table's dtype: the kernels take half weights under f32 activations.
    if (x.dtype !== 'f32') x = run.run1(cast, [x], { to: 'f32' });
    weights.layers.forEach((layer, i) => {
      x = this.#layer(run, layer, this.#quantized?.[i], this.#caches[i]!, x, position, mask);
      if (eager) run.disposeAllBut(x);
    });
    const head = this.#quantizedHead;
    if (head) {
      const normed = run.run1(rmsNorm, [x, weights.norm], { eps: this.config.rmsNormEps });
      return run.run1(
        quantizedMatmul,
        [normed, head.packed, head.scales, head.zeros, undefined, head.offsets],
        {
          format: head.format,
        },
      );
    }
    return this.#normedProduct(run, x, weights.norm, weights.head!);
  }

  /** rmsNorm(x, norm)·weightᵀ: one kernel for a decode step, the norm and the product for a chunk. */
  #normedProduct(run: ScratchRunner, x: Tensor, norm: Tensor, weight: Tensor): Tensor {
    const eps = this.config.rmsNormEps;
    if (this.#fused && x.shape[0] === 1) return run.run1(rmsNormMatmul, [x, norm, weight], { eps });
    return run.run1(matmul, [run.run1(rmsNorm, [x, norm], { eps }), weight], { transB: true });
  }

  /** One pre-norm block on x [T, hidden]; the residual adds ride on the products' `beta·c`. */
  #layer(
    run: ScratchRunner,
    w: LlamaLayerWeights,
    quantized: QuantizedLlamaLayer | undefined,
    cache: LayerCache,
    x: Tensor,
    at: StepPosition,
    mask: Tensor | undefined,
  ): Tensor {
    const {
      rmsNormEps: eps,
      numAttentionHeads: heads,
      numKeyValueHeads: kvHeads,
      headDim,
      ropeTheta,
    } = this.config;
    const t = x.shape[0]!;
    // A device step reads position and length from the model's tensors; an eager one bakes them in.
    const device = at.kind === 'device';
    const position = at.kind === 'host' ? at.position : 0;
    if (this.#fused && t === 1 && !quantized)
      return this.#fusedDecodeLayer(run, w, cache, x, device, position);
    // A chunk normalises once for the three projections.
    const h = run.run1(rmsNorm, [x, w.inputNorm], { eps });
    const project = (name: 'q' | 'k' | 'v') =>
      this.#biased(run, this.#project(run, h, w, quantized, name), w[`${name}Bias`]);
    const rotate = (z: Tensor, n: number) =>
      run.run1(
        rope,
        this.#withFrequencies([z.reshape([t, n, headDim]), device ? this.positionInput : undefined]),
        device
          ? { theta: ropeTheta, layout: 'half' }
          : { positionOffset: position, theta: ropeTheta, layout: 'half' },
      );
    const q = rotate(this.#headNorm(run, project('q'), w.qNorm), heads);
    const k = rotate(this.#headNorm(run, project('k'), w.kNorm), kvHeads);
    const v = project('v');
    const row = device ? this.positionInput : undefined;
    const rowAttrs = device ? {} : { position };
    run.run(kvCacheScatter, [cache.k, k.reshape([t, kvHeads * headDim]), row], rowAttrs);
    run.run(kvCacheScatter, [cache.v, v, row], rowAttrs);
    const attended =
      t === 1
        ? run
            .run1(
              incrementalAttention,
              [q.reshape([heads, headDim]), cache.k, cache.v, device ? this.lengthInput : undefined],
              device ? {} : { seqLen: position + 1 },
            )
            .reshape([1, heads * headDim])
        : position === 0
          ? this.#causalAttention(
              run,
              q,
              this.#headsFirst(run, k.reshape([t, kvHeads * headDim]), kvHeads),
              this.#headsFirst(run, v, kvHeads),
              mask!,
            )
          : this.#causalAttention(run, q, this.#asF32(run, cache.k), this.#asF32(run, cache.v), mask!);
    const x1 = this.#biased(run, this.#project(run, attended, w, quantized, 'o', x), w.oBias);
    return this.#project(run, this.#mlp(run, w, quantized, x1), w, quantized, 'down', x1);
  }

  /** `y` + `bias` (a family's projection bias) on every row, or `y` itself without one. */
  #biased(run: ScratchRunner, y: Tensor, bias: Tensor | undefined): Tensor {
    return bias ? run.run1(biasAdd, [y, bias]) : y;
  }

  /**
   * z [rows, heads·headDim] with every head normalised by `norm` ([headDim]),
   * as [rows·heads, headDim] (Qwen3's q and k norms, before RoPE); z itself
   * without a norm.
   */
  #headNorm(run: ScratchRunner, z: Tensor, norm: Tensor | undefined): Tensor {
    if (!norm) return z;
    const { headDim, rmsNormEps: eps } = this.config;
    return run.run1(rmsNorm, [z.reshape([z.size / headDim, headDim]), norm], { eps });
  }

  /** A RoPE kernel's inputs, with the model's frequency table after them where its RoPE is scaled. */
  #withFrequencies(inputs: (Tensor | undefined)[]): (Tensor | undefined)[] {
    return this.#frequencies ? [...inputs, this.#frequencies] : inputs;
  }

  /** input·Wᵀ (+ residual) for projection `name`: the quantized product where the layer has one. */
  #project(
    run: ScratchRunner,
    input: Tensor,
    w: LlamaLayerWeights,
    quantized: QuantizedLlamaLayer | undefined,
    name: 'q' | 'k' | 'v' | 'o' | 'gate' | 'up' | 'down',
    residual?: Tensor,
  ): Tensor {
    const q = quantized?.[name];
    if (q) {
      return run.run1(quantizedMatmul, [input, q.packed, q.scales, q.zeros, residual, q.offsets], {
        format: q.format,
        beta: 1,
      });
    }
    return run.run1(
      matmul,
      [input, denseProjection(w, name), residual],
      residual ? { transB: true, beta: 1 } : { transB: true },
    );
  }

  /**
   * One token through a layer in six kernels: the norm and the q, k, v
   * projections in one launch; RoPE of q and k with the cache write of k and
   * v in one; the attention; o with the residual; the norm, gate, up and
   * SwiGLU in one; down with the residual.
   */
  #fusedDecodeLayer(
    run: ScratchRunner,
    w: LlamaLayerWeights,
    cache: LayerCache,
    x: Tensor,
    device: boolean,
    position: number,
  ): Tensor {
    const {
      rmsNormEps: eps,
      numAttentionHeads: heads,
      numKeyValueHeads: kvHeads,
      headDim,
      ropeTheta,
    } = this.config;
    const p = (name: (typeof LLAMA_PROJECTIONS)[number]) => denseProjection(w, name);
    const [q0, k0, v0] = run.run(rmsNormMatmul3, [x, w.inputNorm, p('q'), p('k'), p('v')], { eps });
    // A family's biases and head norms between the projections and the rotation (none for a Llama).
    const q = this.#headNorm(run, this.#biased(run, q0!, w.qBias), w.qNorm);
    const k = this.#headNorm(run, this.#biased(run, k0!, w.kBias), w.kNorm);
    const v = this.#biased(run, v0!, w.vBias);
    const [qRot] = run.run(
      ropeKvScatter,
      this.#withFrequencies([
        q.reshape([1, heads, headDim]),
        w.kNorm ? k.reshape([1, kvHeads * headDim]) : k,
        v,
        cache.k,
        cache.v,
        device ? this.positionInput : undefined,
      ]),
      device ? { theta: ropeTheta, layout: 'half' } : { position, theta: ropeTheta, layout: 'half' },
    );
    const attended = run
      .run1(
        incrementalAttention,
        [qRot!.reshape([heads, headDim]), cache.k, cache.v, device ? this.lengthInput : undefined],
        device ? {} : { seqLen: position + 1 },
      )
      .reshape([1, heads * headDim]);
    const x1 = this.#biased(run, run.run1(matmul, [attended, p('o'), x], { transB: true, beta: 1 }), w.oBias);
    const inner = run.run1(gateUpSwiglu, [x1, p('gate'), p('up'), w.postAttentionNorm], { eps });
    return run.run1(matmul, [inner, p('down'), x1], { transB: true, beta: 1 });
  }

  /** silu(h·gateᵀ) ⊙ (h·upᵀ) with h = rmsNorm(x1), unfused (a fused decode step has its own path). */
  #mlp(
    run: ScratchRunner,
    w: LlamaLayerWeights,
    quantized: QuantizedLlamaLayer | undefined,
    x1: Tensor,
  ): Tensor {
    const eps = this.config.rmsNormEps;
    const h1 = run.run1(rmsNorm, [x1, w.postAttentionNorm], { eps });
    // Decoding with quantized gate and up: one launch, the two products never written.
    const fused = quantizedGateUpCall(this.backend, quantized, h1);
    if (fused) return run.run1(quantizedGateUpSwiglu, fused.inputs, fused.attrs);
    const gate = this.#project(run, h1, w, quantized, 'gate');
    const up = this.#project(run, h1, w, quantized, 'up');
    return run.run1(swiglu, [gate, up]);
  }

  /** `t` itself when f32, else a copy cast to f32 (the batched products take one dtype for both operands). */
  #asF32(run: ScratchRunner, t: Tensor): Tensor {
    return t.dtype === 'f32' ? t : run.run1(cast, [t], { to: 'f32' });
  }

  /** [T, n·headDim] → [n, T, headDim]: heads first, the layout of the cache and of the batched products. */
  #headsFirst(run: ScratchRunner, z: Tensor, n: number): Tensor {
    const { headDim } = this.config;
    const t = z.shape[0]!;
    const zT = run.run1(transpose, [z.reshape([t, n * headDim])]);
    return run.run1(transpose, [zT.reshape([n, headDim, t])]);
  }

  /**
   * Causal attention of T rotated queries q [T, heads, headDim] over head-first
   * keys and values [kvHeads, S, headDim] (the chunk's own at position 0,
   * else the whole cache), with the mask [T, S]. Grouped-query attention
   * without copying keys per head: the query heads that share a kv head are
   * stacked along the rows of one batched product per kv head.
   */
  #causalAttention(run: ScratchRunner, q: Tensor, keys: Tensor, values: Tensor, mask: Tensor): Tensor {
    const { numAttentionHeads: heads, numKeyValueHeads: kvHeads, headDim } = this.config;
    const t = q.shape[0]!;
    const s = keys.shape[1]!;
    const group = heads / kvHeads;
    const qHeads = this.#headsFirst(run, q.reshape([t, heads * headDim]), heads);
    const scores = run.run1(batchedMatmul, [qHeads.reshape([kvHeads, group * t, headDim]), keys], {
      transB: true,
      alpha: 1 / Math.sqrt(headDim),
    });
    const probs = run.run1(softmax, [run.run1(add, [scores.reshape([heads, t, s]), mask])]);
    const out = run.run1(batchedMatmul, [probs.reshape([kvHeads, group * t, s]), values]);
    // [heads, T, headDim] → [heads, headDim, T] = [heads·headDim, T] → [T, heads·headDim].
    const outT = run.run1(transpose, [out.reshape([heads, t, headDim])]);
    return run.run1(transpose, [outT.reshape([heads * headDim, t])]);
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
    if (!Number.isInteger(maxNewTokens) || maxNewTokens < 0) {
      throw new InvalidArgumentError('maxNewTokens must be a non-negative integer', {
        kernel: 'generate',
        argument: 'maxNewTokens',
        expected: 'an integer >= 0',
        actual: String(maxNewTokens),
      });
    }
    // The last generated token is never fed back, so it needs no cache row.
    const rows = prompt.length + Math.max(maxNewTokens - 1, 0);
    if (rows > this.maxSequence) {
      throw new InvalidArgumentError('prompt and generated tokens do not fit in the cache', {
        kernel: 'generate',
        argument: 'maxNewTokens',
        expected: `prompt (${prompt.length}) + maxNewTokens − 1 <= maxSequence (${this.maxSequence})`,
        actual: String(maxNewTokens),
      });
    }
    const stop = new Set(options.stop ?? []);
    const rng = new Rng(options.seed ?? 0);
    if (this.#generating) {
      throw new RayoError('the model is already generating', {
        kernel: 'generate',
        expected: 'one generation at a time per model',
        actual: 'a second generate() before the first finished',
      });
    }
    this.#generating = true;
    try {
      this.reset();
      this.#checkChunk('generate', prompt);
      if (maxNewTokens === 0) return;
      const greedy = sampling.temperature === 0;
      let logits = await this.#lastRow(this.prefill(prompt));
      if (greedy && this.#replay && this.backend.supports('argmax')) {
        const first = sampleToken(logits, sampling, rng);
        if (stop.has(first)) return;
        yield first;
        if (maxNewTokens > 1) yield* this.#greedyOnDevice(first, maxNewTokens, stop);
        return;
      }
      for (let i = 0; i < maxNewTokens; i++) {
        const token = sampleToken(logits, sampling, rng);
        if (stop.has(token)) return;
        yield token;
        if (i + 1 < maxNewTokens)
          logits = this.#replay ? await this.#decodeReplayed(token) : await this.#lastRow(this.decode(token));
      }
    } finally {
      this.#generating = false;
    }
  }

  async #lastRow(logits: Tensor): Promise<Float32Array> {
    try {
      const all = (await logits.read()) as Float32Array;
      return all.subarray(all.length - this.config.vocabSize);
    } finally {
      logits.dispose();
    }
  }

  /** Frees the weights and the cache. */
  dispose(): void {
    if (this.#disposed) return;
    this.#disposed = true;
    for (const t of llamaWeightTensors(this.weights)) t.dispose();
    for (const layer of this.#quantized ?? []) disposeQuantizedLayer(layer);
    this.#quantizedEmbedding?.dispose();
    if (this.#quantizedHead !== this.#quantizedEmbedding) this.#quantizedHead?.dispose();
    for (const c of this.#caches) {
      c.k.dispose();
      c.v.dispose();
    }
    this.tokenInput.dispose();
    this.positionInput.dispose();
    this.lengthInput.dispose();
    this.#frequencies?.dispose();
    if (this.#recorded) disposeRecorded(this.#recorded);
    this.#recorded = undefined;
    if (this.#greedy) {
      for (const step of this.#greedy.steps) disposeRecorded(step);
      this.#greedy.tokens[1].dispose();
      this.#greedy = undefined;
    }
  }

  [Symbol.dispose](): void {
    this.dispose();
  }
}

function disposeRecorded(recorded: RecordedStep): void {
  recorded.batch.dispose();
  for (const t of recorded.made) t.dispose();
}

/** A layer's dense projection, which a model without quantized layers must have. */
function denseProjection(w: LlamaLayerWeights, name: (typeof LLAMA_PROJECTIONS)[number]): Tensor {
  const tensor = w[name];
  if (!tensor) {
    throw new InvalidArgumentError(`the layer has no dense '${name}' projection and no quantized one`, {
      kernel: 'LlamaModel',
      argument: `weights.layers[].${name}`,
      expected: 'a dense weight, or quantized layers (LlamaModelOptions.quantized)',
      actual: 'absent',
    });
  }
  return tensor;
}
