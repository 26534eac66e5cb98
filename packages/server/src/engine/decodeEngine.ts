/**
 * What a decode engine is asked to run for one sequence. Every option is
 * settled by the server before it gets here (defaults applied, limits
 * checked), so an engine only runs it.
 */
export interface SequenceRequest {
  /** The prompt's token ids (at least one). */
  readonly promptIds: readonly number[];
  /** Most tokens to generate; the scheduler ends the sequence after this many. */
  readonly maxNewTokens: number;
  /** 0 is greedy. */
  readonly temperature: number;
  readonly topK?: number;
  readonly topP?: number;
  /** Seed of this sequence's sampler: the same seed gives the same tokens. */
  readonly seed: number;
  /** Token ids that end the sequence (EOS and the like); never yielded. */
  readonly stopTokenIds: readonly number[];
}

/**
 * The next token of a sequence, the end of it (a stop token came, which is
 * not yielded), or no token this step: a batched engine runs a prompt in
 * chunks between decode steps, and recomputes a preempted sequence's cache,
 * while the others decode.
 */
export type StepResult =
  | { readonly token: number }
  | { readonly ended: 'stop-token' }
  | { readonly pending: 'prefill' | 'preempted' };

/** A paged engine's pages: what `/metrics` shows of its cache. */
export interface PageUsage {
  readonly pageSize: number;
  readonly inUse: number;
  readonly free: number;
  /** Sequences whose pages were taken for others so far (each recomputes its cache). */
  readonly preemptions: number;
}

/**
 * How much an engine can hold, in sequences and in KV cache rows. An engine
 * of whole slots reserves `maxSequence` rows per sequence; a paged engine
 * reserves pages as a sequence grows, so that its rows in use follow the
 * tokens actually cached.
 */
export interface EngineUsage {
  readonly sequences: number;
  readonly maxSequences: number;
  readonly cacheRows: number;
  readonly maxCacheRows: number;
  /** A paged engine's pages; absent for an engine of whole slots. */
  readonly pages?: PageUsage;
}

/**
 * A decoder that runs many sequences, one token each per step: the seam
 * between the scheduler and the model. The scheduler admits sequences between
 * steps (continuous batching), steps every admitted sequence together, and
 * releases a sequence as soon as it ends or is cancelled. An engine over
 * today's `LlamaModel` holds one sequence per loaded model
 * (`ModelSlotsEngine`); `BatchedEngine` decodes them all in one forward
 * pass over a paged KV cache.
 */
export interface DecodeEngine<S = unknown> {
  /** Most cache rows one sequence may use: prompt tokens + generated tokens − 1. */
  readonly maxSequence: number;
  /**
   * Takes what `request` needs (a slot, cache pages) and returns its
   * sequence, or undefined when there is no room now (the scheduler waits
   * for a release). A request that could never fit is the caller's error.
   */
  admit(request: SequenceRequest): S | undefined;
  /**
   * Advances every sequence of `sequences` by one token: a sequence's first
   * step runs its prompt (a batched engine may take several steps, giving
   * `pending` results meanwhile). Results are in the order of `sequences`; a
   * sequence that ended stays admitted until `release`.
   */
  step(sequences: readonly S[]): Promise<readonly StepResult[]>;
  /** Gives back what `sequence` holds, at once; never called while it is in a step. */
  release(sequence: S): void;
  usage(): EngineUsage;
}
