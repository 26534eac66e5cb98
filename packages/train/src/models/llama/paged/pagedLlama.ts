import {
  argmax,
  type Backend,
  type CommandBatch,
  InvalidArgumentError,
  type KernelRunner,
  pagedAttention,
  pagedKvWrite,
  RayoError,
  ropePagedKvWrite,
  type Tensor,
  TrackingRunner,
  UnsupportedOnBackendError,
} from '@rayo/core';
import { checkIntegerAtLeast } from '../../../integerOption.js';
import type { LlamaConfig } from '../config.js';
import type { LlamaDecoder } from '../decoder.js';
import { lastRow } from '../decoding.js';
import { forward } from '../forward.js';
import { withFrequencies } from '../projections.js';
import { type BatchedStepInputs, batchedDecodeForward, type LayerPages } from './batchedForward.js';
import { type BlockTable, PagePool } from './pagePool.js';

/** How a paged KV cache is laid out and how wide its steps go. */
export interface PagedCacheOptions {
  /** Pages of each layer's pool: all sequences together hold at most pages · pageSize rows. */
  readonly pages: number;
  /** Rows of a page (default 16). */
  readonly pageSize?: number;
  /** Most sequences one decode step takes (1 … 256). */
  readonly maxBatch: number;
  /**
   * Record the step of each batch size (a power of two, idle rows padding
   * the batch up to it) once and replay it (default true); false runs every
   * step eagerly.
   */
  readonly replay?: boolean;
}

/** One sequence of a batched decode step: the token it feeds at `position`, a row its table holds. */
export interface PagedDecodeRow {
  readonly table: BlockTable;
  readonly token: number;
  readonly position: number;
}

export const MAX_BATCH = 256;
const DEFAULT_PAGE_SIZE = 16;

/** A batch size's step inputs and, once recorded, its step. */
interface Bucket {
  readonly size: number;
  readonly inputs: BatchedStepInputs;
  /** The block tables last written: a table changes once a page, so most steps need not upload them. */
  tables: Int32Array | undefined;
  recorded:
    | {
        readonly batch: CommandBatch;
        readonly made: Tensor[];
        readonly logits: Tensor;
        /** i32 [size]: each row's argmax, where the backend has one. */
        readonly chosen: Tensor | undefined;
      }
    | undefined;
}

/**
 * A paged KV cache over one Llama model's weights, for decoding many
 * sequences at once: every layer's keys and values live in pages of one
 * pool ([pages, kvHeads, pageSize, headDim]), each sequence reaching its
 * rows through its block table (`pool`). `prefill` runs a sequence's
 * prompt in chunks and writes its rows into its pages; `decode` advances
 * any set of sequences by one token in one forward pass. The model's own
 * KV cache is the scratch of the prompt being prefilled (its chunks attend
 * over it), so the model runs nothing else while this cache is in use.
 * Made by `LlamaModel.pagedCache`.
 */
export class PagedLlama {
  readonly backend: Backend;
  readonly config: LlamaConfig;
  readonly pool: PagePool;
  readonly maxBatch: number;
  /** Rows one sequence may hold: the model's `maxSequence`. */
  readonly maxSequence: number;
  /** Block-table entries per sequence: the pages of `maxSequence` rows. */
  readonly maxPagesPerSeq: number;
  readonly #decoder: LlamaDecoder;
  readonly #pages: readonly LayerPages[];
  readonly #replay: boolean;
  /** Most prompt tokens one forward pass takes: the model's `prefillChunk`. */
  readonly #prefillChunk: number;
  readonly #buckets = new Map<number, Bucket>();
  /** The table whose prompt rows the model's own cache holds, and how many. */
  #scratch: { table: BlockTable | undefined; rows: number } = { table: undefined, rows: 0 };
  #disposed = false;

  /** @internal `LlamaModel.pagedCache` makes it over the model's decoder. */
  constructor(decoder: LlamaDecoder, options: PagedCacheOptions, prefillChunk: number) {
    const { backend, config, kvCacheDtype } = decoder;
    const pageSize = options.pageSize ?? DEFAULT_PAGE_SIZE;
    checkIntegerAtLeast('pagedCache', 'maxBatch', options.maxBatch, 1);
    if (options.maxBatch > MAX_BATCH) {
      throw new InvalidArgumentError('maxBatch is too large', {
        operation: 'pagedCache',
        argument: 'maxBatch',
        expected: `an integer in [1, ${MAX_BATCH}]`,
        actual: String(options.maxBatch),
      });
    }
    for (const kernel of [pagedKvWrite.name, ropePagedKvWrite.name, pagedAttention.name]) {
      if (!backend.supports(kernel)) {
        throw new UnsupportedOnBackendError(`the ${backend.name} backend has no ${kernel}`, {
          kernel,
          expected: `a backend that implements ${kernel}`,
          actual: backend.name,
        });
      }
    }
    this.pool = new PagePool(options.pages, pageSize);
    this.backend = backend;
    this.config = config;
    this.maxBatch = options.maxBatch;
    this.maxSequence = decoder.maxSequence;
    this.maxPagesPerSeq = this.pool.pagesFor(decoder.maxSequence);
    this.#decoder = decoder;
    this.#replay = options.replay ?? true;
    this.#prefillChunk = prefillChunk;
    const shape = [options.pages, config.numKeyValueHeads, pageSize, config.headDim];
    // Zeros: attention never reads a row before it is written, but no memory is left uninitialised.
    this.#pages = decoder.weights.layers.map(() => ({
      k: backend.zeros(shape, kvCacheDtype),
      v: backend.zeros(shape, kvCacheDtype),
    }));
  }

  /**
   * Runs `tokens` of the sequence of `table` at rows `position` … and writes
   * their keys and values into its pages (the table must hold those rows).
   * A sequence's chunks run in order, with no other sequence's prompt
   * between them (position 0 starts a prompt). With `wantLogits`, returns
   * the logits [vocab] of the last token.
   */
  async prefill(
    table: BlockTable,
    tokens: readonly number[],
    position: number,
    wantLogits: boolean,
  ): Promise<Float32Array | undefined> {
    this.#check('prefill', tokens);
    const end = position + tokens.length;
    if (position !== 0 && (this.#scratch.table !== table || this.#scratch.rows !== position)) {
      throw new RayoError("a prompt's chunks must run in order, one prompt at a time", {
        operation: 'PagedLlama.prefill',
        argument: 'position',
        expected:
          this.#scratch.table === table ? `${this.#scratch.rows} (the rows run so far)` : '0 (a new prompt)',
        actual: String(position),
      });
    }
    this.#checkRows('prefill', table, end);
    this.#scratch = { table, rows: 0 };
    const chunk = this.#prefillChunk;
    let logits: Float32Array | undefined;
    for (let start = 0; start < tokens.length; start += chunk) {
      const part = tokens.slice(start, start + chunk);
      const last = start + chunk >= tokens.length;
      const out = this.#runChunk(table, part, position + start);
      if (last && wantLogits) logits = await lastRow(out, this.config.vocabSize);
      else out.dispose();
    }
    this.#scratch = { table, rows: end };
    return logits;
  }

  /**
   * Advances every row's sequence by one token in one forward pass: each
   * token goes in at its position (its key and value into its table's
   * page), attends over its sequence's rows 0 … position, and gives the
   * logits of the next token. Returns the logits [rows, vocab], row by row.
   */
  async decode(rows: readonly PagedDecodeRow[]): Promise<Float32Array> {
    const logits = await this.#step('decode', rows, 'logits');
    return logits.subarray(0, rows.length * this.config.vocabSize) as Float32Array;
  }

  /**
   * `decode` that returns each row's most likely next token (the lowest id
   * on a tie, as greedy sampling picks), chosen on the device where the
   * backend has `argmax`: B ids cross to the host, not B × vocab logits.
   */
  async decodeGreedy(rows: readonly PagedDecodeRow[]): Promise<Int32Array> {
    const values = await this.#step('decodeGreedy', rows, 'tokens');
    if (values instanceof Int32Array) return values.subarray(0, rows.length);
    const vocab = this.config.vocabSize;
    return Int32Array.from(rows, (_, b) => firstMax(values.subarray(b * vocab, (b + 1) * vocab)));
  }

  /** One batched step: the logits, or the device's argmax of each row where it has one. */
  async #step(
    api: string,
    rows: readonly PagedDecodeRow[],
    want: 'logits' | 'tokens',
  ): Promise<Float32Array | Int32Array> {
    const bucket = this.#prepare(api, rows);
    const onDevice = want === 'tokens' && this.backend.supports(argmax.name);
    if (this.#replay) {
      bucket.recorded ??= this.#record(bucket);
      const { batch, logits, chosen } = bucket.recorded;
      // Reads are ordered after submitted work: no wait for the submit alone.
      const [, values] = await Promise.all([batch.submit(), (onDevice ? chosen! : logits).read()]);
      return values as Float32Array | Int32Array;
    }
    const run = new TrackingRunner(this.backend);
    try {
      const logits = batchedDecodeForward(this.#decoder, run, this.#pages, bucket.inputs);
      const read = onDevice ? run.run1(argmax, [logits]) : logits;
      return (await read.read()) as Float32Array | Int32Array;
    } finally {
      run.dispose();
    }
  }

  /**
   * Writes `rows` (checked as `decode` checks them) into the device inputs
   * of the step of their batch size (the smallest power of two that holds
   * them, or maxBatch; idle rows past them) and returns those inputs. A step
   * recorded over them with `recordDecodeStep` runs for whatever rows were
   * written last: this is how a profiler or a benchmark replays the batched
   * step outside `decode`.
   */
  writeDecodeInputs(rows: readonly PagedDecodeRow[]): BatchedStepInputs {
    return this.#prepare('writeDecodeInputs', rows).inputs;
  }

  /**
   * Records the batched decode step over `inputs` (from `writeDecodeInputs`)
   * into `runner` (a batch, a profiler's runner): the logits [B, vocab] and,
   * where the backend has `argmax`, each row's argmax (i32 [B]). Every
   * tensor it allocates, these included, is pushed to `made`.
   */
  recordDecodeStep(
    runner: KernelRunner,
    made: Tensor[],
    inputs: BatchedStepInputs,
  ): { readonly logits: Tensor; readonly chosen: Tensor | undefined } {
    this.#checkAlive('recordDecodeStep');
    if (![...this.#buckets.values()].some((b) => b.inputs === inputs)) {
      throw new InvalidArgumentError('the step inputs are not those of this paged cache', {
        operation: 'PagedLlama.recordDecodeStep',
        argument: 'inputs',
        expected: 'the inputs writeDecodeInputs returned on this cache',
        actual: `inputs of ${inputs.tokens.shape[0]} rows from elsewhere`,
      });
    }
    const run = new TrackingRunner(runner);
    try {
      const logits = batchedDecodeForward(this.#decoder, run, this.#pages, inputs);
      // The greedy pick rides in the same batch (one small kernel); an all-greedy step reads it instead of the logits.
      const chosen = this.backend.supports(argmax.name) ? run.run1(argmax, [logits]) : undefined;
      return { logits, chosen };
    } finally {
      made.push(...run.release());
    }
  }

  /** Frees the pages, the step inputs and the recorded steps (not the model). */
  dispose(): void {
    if (this.#disposed) return;
    this.#disposed = true;
    for (const p of this.#pages) {
      p.k.dispose();
      p.v.dispose();
    }
    for (const bucket of this.#buckets.values()) {
      if (bucket.recorded) {
        bucket.recorded.batch.dispose();
        for (const t of bucket.recorded.made) t.dispose();
      }
      for (const t of Object.values(bucket.inputs)) t.dispose();
    }
    this.#buckets.clear();
  }

  [Symbol.dispose](): void {
    this.dispose();
  }

  /** One prompt chunk at `position`: its rows attend over the model's cache and go to their page slots. */
  #runChunk(table: BlockTable, tokens: readonly number[], position: number): Tensor {
    const { backend } = this;
    // Outside the runner: an eager pass frees each layer's intermediates, and every layer writes at these slots.
    using ids = backend.upload(Int32Array.from(tokens), [tokens.length], 'i32');
    using slots = backend.upload(
      Int32Array.from(tokens, (_, i) => this.#slot(table, position + i)),
      [tokens.length],
      'i32',
    );
    // A fused layer's rows are rotated here, each at its position.
    using positions = backend.upload(
      Int32Array.from(tokens, (_, i) => position + i),
      [tokens.length],
      'i32',
    );
    const d = this.#decoder;
    const { numAttentionHeads: heads, numKeyValueHeads: kvHeads, headDim, ropeTheta: theta } = d.config;
    const run = new TrackingRunner(backend);
    try {
      const logits = forward(d, run, ids, position, true, 1, (layer, rows) => {
        const pool = this.#pages[layer]!;
        if ('qkv' in rows) {
          const qkv = rows.qkv.reshape([tokens.length, heads + 2 * kvHeads, headDim]);
          run.run(
            ropePagedKvWrite,
            withFrequencies(d, [qkv, undefined, undefined, pool.k, pool.v, slots, positions]),
            { theta, layout: 'half' },
          );
        } else run.run(pagedKvWrite, [rows.k, rows.v, pool.k, pool.v, slots]);
      });
      return run.keep(logits);
    } finally {
      run.dispose();
    }
  }

  /** The pool slot (page · pageSize + offset) of row `row` of `table`. */
  #slot(table: BlockTable, row: number): number {
    const { pageSize } = this.pool;
    return table.pages[Math.floor(row / pageSize)]! * pageSize + (row % pageSize);
  }

  /** The step of the smallest power of two of rows (or maxBatch) that holds `rows`. */
  #bucket(rows: number): Bucket {
    const size = Math.min(this.maxBatch, 2 ** Math.ceil(Math.log2(rows)));
    let bucket = this.#buckets.get(size);
    if (!bucket) {
      const { backend } = this;
      const zeros = (shape: number[]) => backend.zeros(shape, 'i32');
      bucket = {
        size,
        inputs: {
          tokens: zeros([size]),
          positions: zeros([size]),
          slots: zeros([size]),
          blockTables: zeros([size, this.maxPagesPerSeq]),
          seqLens: zeros([size]),
        },
        recorded: undefined,
        tables: undefined,
      };
      this.#buckets.set(size, bucket);
    }
    return bucket;
  }

  /** Writes the rows' inputs into `bucket`'s tensors; the rows past them are idle. */
  #write(bucket: Bucket, rows: readonly PagedDecodeRow[]): void {
    const { size, inputs } = bucket;
    const width = this.maxPagesPerSeq;
    const tokens = new Int32Array(size);
    const positions = new Int32Array(size);
    const slots = new Int32Array(size).fill(-1);
    const seqLens = new Int32Array(size);
    const tables = new Int32Array(size * width);
    rows.forEach((row, b) => {
      tokens[b] = row.token;
      positions[b] = row.position;
      slots[b] = this.#slot(row.table, row.position);
      seqLens[b] = row.position + 1;
      tables.set(row.table.pages, b * width);
    });
    const { backend } = this;
    backend.write(inputs.tokens, tokens);
    backend.write(inputs.positions, positions);
    backend.write(inputs.slots, slots);
    backend.write(inputs.seqLens, seqLens);
    if (!bucket.tables || bucket.tables.some((page, i) => page !== tables[i])) {
      backend.write(inputs.blockTables, tables);
      bucket.tables = tables;
    }
  }

  #record(bucket: Bucket): NonNullable<Bucket['recorded']> {
    const batch = this.backend.batch();
    const made: Tensor[] = [];
    try {
      return { batch, made, ...this.recordDecodeStep(batch, made, bucket.inputs) };
    } catch (error) {
      batch.dispose();
      for (const t of made) t.dispose();
      throw error;
    }
  }

  /** Checks a step's rows and writes them into the inputs of their batch size's step. */
  #prepare(api: string, rows: readonly PagedDecodeRow[]): Bucket {
    this.#check(
      api,
      rows.map((r) => r.token),
    );
    if (rows.length > this.maxBatch) {
      throw new InvalidArgumentError('too many sequences for one step', {
        operation: `PagedLlama.${api}`,
        argument: 'rows',
        expected: `at most ${this.maxBatch} (maxBatch)`,
        actual: String(rows.length),
      });
    }
    for (const row of rows) this.#checkRows(api, row.table, row.position + 1);
    const bucket = this.#bucket(rows.length);
    this.#write(bucket, rows);
    return bucket;
  }

  #check(api: string, tokens: readonly number[]): void {
    this.#checkAlive(api);
    const vocab = this.config.vocabSize;
    const bad = tokens.findIndex((t) => !Number.isInteger(t) || t < 0 || t >= vocab);
    if (tokens.length === 0 || bad >= 0) {
      throw new InvalidArgumentError('token ids must be integers in [0, vocab_size)', {
        operation: `PagedLlama.${api}`,
        argument: 'tokens',
        expected: `at least one id in [0, ${vocab})`,
        actual: tokens.length === 0 ? 'no tokens' : `${tokens[bad]} at index ${bad}`,
      });
    }
  }

  #checkAlive(api: string): void {
    if (this.#disposed) {
      throw new RayoError('the paged cache was disposed', {
        operation: `PagedLlama.${api}`,
        expected: 'a live paged cache',
        actual: 'disposed',
      });
    }
  }

  /** `table` must hold rows 0 … rows − 1, within `maxSequence`. */
  #checkRows(api: string, table: BlockTable, rows: number): void {
    if (rows > this.maxSequence || table.rows < rows) {
      throw new InvalidArgumentError('the block table does not hold the rows written', {
        operation: `PagedLlama.${api}`,
        argument: 'table',
        expected: `at least ${rows} rows reserved, within maxSequence ${this.maxSequence}`,
        actual: `${table.rows} rows`,
      });
    }
  }
}

/** The first index of the largest value: greedy's pick on the host. */
function firstMax(row: Float32Array): number {
  let best = 0;
  for (let i = 1; i < row.length; i++) if (row[i]! > row[best]!) best = i;
  return best;
}
