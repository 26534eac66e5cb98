import type { BatchedEngine, BatchedSequence } from '@rayo/server';
import type { BlockTable, PagedDecodeRow, PagedLlama } from '@rayo/train';

/**
 * The two ways batch-bench decodes B streams: through `@rayo/server`'s
 * `BatchedEngine` (scheduling, tables grown a row at a time, the step), and
 * through `PagedLlama.decodeGreedy` alone (tables reserved once, the step and
 * nothing else), so that the engine's own host work shows as the difference.
 */

/** One batch size's run on one path. */
export interface BatchRun {
  readonly batch: number;
  /** From admission until every stream has its first token (the prompts, one chunk per step). */
  readonly prefillMs: number;
  readonly decodeSteps: number;
  readonly decodeMs: number;
  /** batch · decodeSteps / decodeMs. */
  readonly tokensPerSecond: number;
  /** A step gives every stream one token: the median and 90th percentile step. */
  readonly p50MsPerToken: number;
  readonly p90MsPerToken: number;
  readonly tokens: readonly (readonly number[])[];
}

function quantile(sorted: readonly number[], q: number): number {
  const pos = q * (sorted.length - 1);
  const lo = Math.floor(pos);
  const hi = Math.ceil(pos);
  return sorted[lo]! + (sorted[hi]! - sorted[lo]!) * (pos - lo);
}

/** The run's figures from its decode steps' wall times (ms) and every stream's tokens. */
function batchRun(batch: number, prefillMs: number, steps: readonly number[], tokens: number[][]): BatchRun {
  const decodeMs = steps.reduce((a, b) => a + b, 0);
  const sorted = [...steps].sort((a, b) => a - b);
  const decoded = tokens.reduce((n, t) => n + t.length - 1, 0);
  return {
    batch,
    prefillMs,
    decodeSteps: steps.length,
    decodeMs,
    tokensPerSecond: decoded / (decodeMs / 1000),
    p50MsPerToken: quantile(sorted, 0.5),
    p90MsPerToken: quantile(sorted, 0.9),
    tokens,
  };
}

/** Runs `prompts` to `newTokens` tokens each through `engine`, timing every step after the prompts. */
export async function runEngine(
  engine: BatchedEngine,
  prompts: readonly number[][],
  newTokens: number,
): Promise<BatchRun> {
  const sequences: BatchedSequence[] = prompts.map((promptIds) => {
    const s = engine.admit({ promptIds, maxNewTokens: newTokens, temperature: 0, seed: 0, stopTokenIds: [] });
    if (!s) throw new Error(`the engine did not admit ${prompts.length} streams`);
    return s;
  });
  const tokens = prompts.map(() => [] as number[]);
  /** Steps `indices`' sequences once, taking their tokens. */
  const step = async (indices: readonly number[]) => {
    const results = await engine.step(indices.map((i) => sequences[i]!));
    results.forEach((r, k) => {
      if ('token' in r) tokens[indices[k]!]!.push(r.token);
    });
  };
  const all = prompts.map((_, i) => i);
  try {
    // The prompts, one per step; a stream with its first token waits, so that all decode the same steps.
    const start = performance.now();
    for (let left = all; left.length > 0; left = all.filter((i) => tokens[i]!.length === 0)) await step(left);
    const prefillMs = performance.now() - start;
    const steps: number[] = [];
    while (tokens[0]!.length < newTokens) {
      const t0 = performance.now();
      await step(all);
      steps.push(performance.now() - t0);
    }
    return batchRun(prompts.length, prefillMs, steps, tokens);
  } finally {
    for (const s of sequences) engine.release(s);
  }
}

/** The first index of the largest value: greedy's pick. */
function firstMax(row: Float32Array): number {
  let best = 0;
  for (let i = 1; i < row.length; i++) if (row[i]! > row[best]!) best = i;
  return best;
}

/**
 * Runs `prompts` to `newTokens` tokens each with `paged` alone: every table
 * reserved for its whole length up front, each prompt prefilled, then every
 * step one `decodeGreedy` of all streams, timed. `atEnd`, given, runs with
 * the rows of the last step (tables still held) before they are released.
 */
export async function runSteps(
  paged: PagedLlama,
  prompts: readonly number[][],
  newTokens: number,
  atEnd?: (rows: readonly PagedDecodeRow[]) => Promise<void>,
): Promise<BatchRun> {
  const tables: BlockTable[] = [];
  try {
    const start = performance.now();
    const tokens: number[][] = [];
    for (const prompt of prompts) {
      const table = paged.pool.table();
      tables.push(table);
      // The last step feeds row prompt + newTokens − 2.
      if (!paged.pool.grow(table, prompt.length + newTokens - 1))
        throw new Error(`the page pool cannot hold ${prompts.length} streams at full length`);
      const logits = await paged.prefill(table, prompt, 0, true);
      tokens.push([firstMax(logits!)]);
    }
    const prefillMs = performance.now() - start;
    const rowsNow = (): PagedDecodeRow[] =>
      tables.map((table, i) => ({
        table,
        token: tokens[i]!.at(-1)!,
        position: prompts[i]!.length + tokens[i]!.length - 1,
      }));
    const steps: number[] = [];
    let last = rowsNow();
    while (tokens[0]!.length < newTokens) {
      last = rowsNow();
      const t0 = performance.now();
      const chosen = await paged.decodeGreedy(last);
      steps.push(performance.now() - t0);
      for (const [i, t] of tokens.entries()) t.push(chosen[i]!);
    }
    await atEnd?.(last);
    return batchRun(prompts.length, prefillMs, steps, tokens);
  } finally {
    for (const t of tables) paged.pool.release(t);
  }
}
