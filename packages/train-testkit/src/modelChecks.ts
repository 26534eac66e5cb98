// What the model tests share: the backends they run on and how far their
// logits and tokens are from the reference's.
import { type Backend, createBackend, createCpuBackend, type HostArray, probeBackends } from '@rayo/core';
import type { LlamaModel } from '@rayo/train';
import { expect } from 'vitest';
import { referenceGreedy, type TinyWeights } from './tinyLlama.js';

/**
 * cpu, and wgpu where an adapter is, each with a function that creates it.
 * Under CI the wgpu backend must be there (Mesa lavapipe): a missing adapter
 * fails its tests rather than leaving them out.
 */
export async function modelTestBackends(): Promise<[string, () => Promise<Backend>][]> {
  const wgpu = (await probeBackends(['wgpu']))[0]!;
  const backends: [string, () => Promise<Backend>][] = [['cpu', async () => createCpuBackend()]];
  if (wgpu.available || process.env.CI === 'true') backends.push(['wgpu', () => createBackend('wgpu')]);
  return backends;
}

/**
 * A describe block's backend, created on first use, and the models its tests
 * load; `dispose` (for `afterAll`) releases the models, then the backend.
 */
export class ModelScope {
  #backend: Backend | undefined;
  readonly #models: { dispose(): void }[] = [];

  constructor(private readonly create: () => Promise<Backend>) {}

  async backend(): Promise<Backend> {
    this.#backend ??= await this.create();
    return this.#backend;
  }

  /** Disposes `models` with the scope. */
  keep(...models: { dispose(): void }[]): void {
    this.#models.push(...models);
  }

  readonly dispose = (): void => {
    for (const m of this.#models) m.dispose();
    this.#backend?.dispose();
  };
}

/** The largest |got[i] − want[i]|; arrays of different lengths are an error. */
export function maxAbsDiff(got: ArrayLike<number>, want: ArrayLike<number>): number {
  if (got.length !== want.length) throw new Error(`maxAbsDiff: ${got.length} values against ${want.length}`);
  let worst = 0;
  for (let i = 0; i < want.length; i++) worst = Math.max(worst, Math.abs(got[i]! - want[i]!));
  return worst;
}

/**
 * The largest maxAbsDiff of each row of `got` (rows of `vocab` logits, as a
 * prefill reads) against the reference row of the same index; `got` must
 * hold exactly `want.length` rows.
 */
export function maxRowDiff(got: HostArray, want: readonly ArrayLike<number>[], vocab: number): number {
  if (got.length !== want.length * vocab) {
    throw new Error(`maxRowDiff: ${got.length} logits against ${want.length} rows of ${vocab}`);
  }
  return Math.max(0, ...want.map((row, t) => maxAbsDiff(got.subarray(t * vocab, (t + 1) * vocab), row)));
}

/** Every token of a generation, in order. */
export async function collectTokens(tokens: AsyncIterable<number>): Promise<number[]> {
  const out: number[] = [];
  for await (const t of tokens) out.push(t);
  return out;
}

/**
 * The `count` tokens `model` generates greedily after `prompt`, the reference's,
 * and the smallest margin of the reference's choices (the comparison means
 * something only where that margin is clear of the logits' tolerance).
 */
export async function greedyAgainstReference(
  model: LlamaModel,
  config: Record<string, unknown>,
  weights: TinyWeights,
  prompt: readonly number[],
  count: number,
): Promise<{ got: number[]; want: number[]; margin: number }> {
  const ref = referenceGreedy(config, weights, prompt, count);
  const got = await collectTokens(model.generate(prompt, { maxNewTokens: count }));
  return { got, want: ref.tokens, margin: Math.min(...ref.margins) };
}

/**
 * Expects `model` to generate the reference's `count` greedy tokens after
 * `prompt`, the reference having chosen each by more than ten times the
 * logits' `tolerance`, so that the agreement means something.
 */
export async function expectReferenceGreedy(
  model: LlamaModel,
  config: Record<string, unknown>,
  weights: TinyWeights,
  prompt: readonly number[],
  count: number,
  tolerance: number,
): Promise<void> {
  const greedy = await greedyAgainstReference(model, config, weights, prompt, count);
  expect(greedy.margin).toBeGreaterThan(10 * tolerance);
  expect(greedy.got).toEqual(greedy.want);
}
