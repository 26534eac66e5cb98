import { InvalidArgumentError } from '@rayo/core';
import {
  type BlockTable,
  checkSamplingOptions,
  type PagedLlama,
  Rng,
  type SamplingOptions,
  sampleToken,
} from '@rayo/train';
import type { DecodeEngine, EngineUsage, SequenceRequest, StepResult } from './decodeEngine.js';

/** How a batched engine splits its steps between prompts and decoding. */
export interface BatchedEngineOptions {
  /**
   * Prompt tokens one step runs (default 512): a longer prompt takes several
   * steps, each also decoding a token of every running sequence, so that a
   * long prompt does not stall the streams already running.
   */
  readonly prefillTokens?: number;
}

const DEFAULT_PREFILL_TOKENS = 512;

/** A sequence of `BatchedEngine`, numbered in the order it was admitted. */
export interface BatchedSequence {
  readonly id: number;
  readonly request: SequenceRequest;
}

interface Running extends BatchedSequence {
  readonly table: BlockTable;
  /** The prompt, then the tokens generated. */
  readonly tokens: number[];
  generated: number;
  /** Rows whose keys and values are in the pages. */
  cached: number;
  readonly sampling: Required<SamplingOptions>;
  readonly rng: Rng;
  readonly stop: ReadonlySet<number>;
}

function misuse(call: string, argument: string, expected: string, actual: string, message: string) {
  return new InvalidArgumentError(message, { operation: `BatchedEngine${call}`, argument, expected, actual });
}

/**
 * Continuous batching over one copy of the weights: every running sequence
 * advances by one token in one forward pass (`PagedLlama.decode`), its
 * keys and values in pages of a shared pool, so N streams read the weights
 * once per step, not N times. A sequence is admitted while fewer than
 * `maxBatch` run and the pool has the pages its prompt needs beside the
 * prompts already admitted; it takes a page as its rows cross a page
 * boundary. A prompt runs in chunks of `prefillTokens`, one chunk per step
 * and one prompt at a time, oldest first, its sequence `pending` meanwhile.
 * When a running sequence needs a page and none is free, the newest
 * sequence holding pages gives all of its pages back (preemption) and later
 * recomputes its cache from its prompt and the tokens it made, as vLLM
 * does. The engine does not own the paged cache: whoever made it disposes it.
 */
export class BatchedEngine implements DecodeEngine<BatchedSequence> {
  readonly maxSequence: number;
  readonly paged: PagedLlama;
  readonly #prefillTokens: number;
  readonly #live = new Map<number, Running>();
  #nextId = 0;
  #preemptions = 0;

  constructor(paged: PagedLlama, options: BatchedEngineOptions = {}) {
    const prefillTokens = options.prefillTokens ?? DEFAULT_PREFILL_TOKENS;
    if (!Number.isSafeInteger(prefillTokens) || prefillTokens < 1) {
      throw misuse(
        '',
        'prefillTokens',
        'an integer >= 1',
        String(prefillTokens),
        'prefillTokens must be a positive integer',
      );
    }
    this.paged = paged;
    this.#prefillTokens = prefillTokens;
    const { pool } = paged;
    // A sequence may not hold more rows than the whole pool.
    this.maxSequence = Math.min(paged.maxSequence, pool.pages * pool.pageSize);
  }

  admit(request: SequenceRequest): BatchedSequence | undefined {
    const { promptIds, maxNewTokens } = request;
    const vocab = this.paged.config.vocabSize;
    const bad = promptIds.findIndex((t) => !Number.isInteger(t) || t < 0 || t >= vocab);
    if (promptIds.length === 0 || bad >= 0) {
      throw misuse(
        '.admit',
        'request.promptIds',
        `at least one id in [0, ${vocab})`,
        promptIds.length === 0 ? 'no tokens' : `${promptIds[bad]} at index ${bad}`,
        'prompt ids must be token ids of the model',
      );
    }
    const rows = promptIds.length + Math.max(maxNewTokens - 1, 0);
    if (rows > this.maxSequence) {
      throw misuse(
        '.admit',
        'request',
        `prompt + maxNewTokens − 1 <= ${this.maxSequence} rows`,
        `${promptIds.length} + ${maxNewTokens} − 1`,
        'the request does not fit the cache',
      );
    }
    const sampling = checkSamplingOptions(request);
    const { pool } = this.paged;
    if (this.#live.size >= this.paged.maxBatch) return undefined;
    // Pages the admitted prompts will still take come first.
    let promised = 0;
    for (const s of this.#live.values()) {
      if (isDecoding(s)) continue;
      promised += Math.max(0, pool.pagesFor(prefillTarget(s)) - s.table.pages.length);
    }
    if (this.#live.size > 0 && pool.freePages - promised < pool.pagesFor(promptIds.length + 1)) {
      return undefined;
    }
    const sequence: Running = {
      id: this.#nextId++,
      request,
      table: pool.table(),
      tokens: [...promptIds],
      generated: 0,
      cached: 0,
      sampling,
      rng: new Rng(request.seed),
      stop: new Set(request.stopTokenIds),
    };
    this.#live.set(sequence.id, sequence);
    return sequence;
  }

  async step(sequences: readonly BatchedSequence[]): Promise<readonly StepResult[]> {
    const batch = sequences.map((s) => this.#running(s, 'step'));
    const results = new Map<Running, StepResult>();
    const decoding: Running[] = [];
    // Oldest first: the newest sequence holding pages is the one preempted.
    for (const s of [...batch].sort((a, b) => a.id - b.id)) {
      if (results.has(s) || !isDecoding(s)) continue;
      if (this.#makeRoom(s, s.cached + 1, results)) decoding.push(s);
    }
    if (decoding.length > 0) await this.#decode(decoding, results);
    await this.#prefillStep(batch, results);
    return batch.map((s) => results.get(s) ?? { pending: 'prefill' });
  }

  release(sequence: BatchedSequence): void {
    const running = this.#running(sequence, 'release');
    this.paged.pool.release(running.table);
    this.#live.delete(running.id);
  }

  usage(): EngineUsage {
    const pool = this.paged.pool.usage();
    return {
      sequences: this.#live.size,
      maxSequences: this.paged.maxBatch,
      cacheRows: pool.pagesInUse * pool.pageSize,
      maxCacheRows: pool.pages * pool.pageSize,
      pages: {
        pageSize: pool.pageSize,
        inUse: pool.pagesInUse,
        free: pool.pagesFree,
        preemptions: this.#preemptions,
      },
    };
  }

  /**
   * Grows `s`'s table to `rows`, preempting the newest sequences that hold
   * pages until it fits; false when `s` itself was the newest (preempted).
   */
  #makeRoom(s: Running, rows: number, results: Map<Running, StepResult>): boolean {
    const { pool } = this.paged;
    while (!pool.grow(s.table, rows)) {
      let victim: Running | undefined;
      for (const other of this.#live.values()) {
        if (other.table.pages.length > 0 && (!victim || other.id > victim.id)) victim = other;
      }
      // The pool holds any one sequence whole, so something else holds pages while s cannot grow.
      this.#preempt(victim!);
      results.set(victim!, { pending: 'preempted' });
      if (victim === s) return false;
    }
    return true;
  }

  #preempt(s: Running): void {
    this.paged.pool.clear(s.table);
    s.cached = 0;
    this.#preemptions++;
  }

  /** Runs one chunk of the oldest prompt still to run (its last chunk gives its first token). */
  async #prefillStep(batch: readonly Running[], results: Map<Running, StepResult>): Promise<void> {
    let next: Running | undefined;
    for (const s of batch) {
      if (!results.has(s) && !isDecoding(s) && (!next || s.id < next.id)) next = s;
    }
    if (!next) return;
    const { pool } = this.paged;
    // One prompt at a time runs in the model's scratch cache: a younger one begun there starts over.
    for (const s of this.#live.values()) {
      if (s === next || isDecoding(s) || s.cached === 0) continue;
      pool.clear(s.table);
      s.cached = 0;
    }
    const target = prefillTarget(next);
    const end = Math.min(target, next.cached + this.#prefillTokens);
    // Running sequences come first: a prompt waits for pages rather than take theirs.
    if (!pool.grow(next.table, end)) return;
    const last = end === target && next.generated === 0;
    const logits = await this.paged.prefill(
      next.table,
      next.tokens.slice(next.cached, end),
      next.cached,
      last,
    );
    next.cached = end;
    if (logits) results.set(next, this.#pick(next, logits));
  }

  /** One token of every sequence of `decoding`, in one step; chosen on the device when all are greedy. */
  async #decode(decoding: readonly Running[], results: Map<Running, StepResult>): Promise<void> {
    const rows = decoding.map((s) => ({ table: s.table, token: s.tokens.at(-1)!, position: s.cached }));
    for (const s of decoding) s.cached++;
    if (decoding.every((s) => s.sampling.temperature === 0)) {
      const tokens = await this.paged.decodeGreedy(rows);
      decoding.forEach((s, i) => {
        results.set(s, this.#take(s, tokens[i]!));
      });
      return;
    }
    const logits = await this.paged.decode(rows);
    const vocab = this.paged.config.vocabSize;
    decoding.forEach((s, i) => {
      results.set(s, this.#pick(s, logits.subarray(i * vocab, (i + 1) * vocab)));
    });
  }

  /** The next token of `s` from its logits, by its sampling. */
  #pick(s: Running, logits: Float32Array): StepResult {
    return this.#take(s, sampleToken(logits, s.sampling, s.rng));
  }

  /** `token` as `s`'s next: a stop token ends it. */
  #take(s: Running, token: number): StepResult {
    if (s.stop.has(token)) return { ended: 'stop-token' };
    s.tokens.push(token);
    s.generated++;
    return { token };
  }

  #running(sequence: BatchedSequence, call: string): Running {
    const running = this.#live.get(sequence.id);
    if (running !== sequence) {
      throw misuse(
        `.${call}`,
        'sequence',
        'a sequence admit() returned and not yet released',
        `sequence ${sequence.id}, not admitted here`,
        'the sequence is not admitted',
      );
    }
    return running;
  }
}

/** The rows a sequence's prompt run caches: all its tokens but the last generated one, which decoding feeds. */
function prefillTarget(s: Running): number {
  return s.generated === 0 ? s.tokens.length : s.tokens.length - 1;
}

/** Whether `s` has its cache and decodes (rather than runs its prompt or recomputes). */
function isDecoding(s: Running): boolean {
  return s.generated > 0 && s.cached === s.tokens.length - 1;
}
