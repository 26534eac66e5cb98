import { InvalidArgumentError, RayoError } from '@rayo/core';
import type { Rng } from '../random.js';

/** How the next token is chosen from a row of logits. */
export interface SamplingOptions {
  /** 0 (the default) is greedy: the most likely token, the lowest id on a tie. */
  readonly temperature?: number;
  /** Sample only among the `topK` most likely tokens (default: all). */
  readonly topK?: number;
  /** Sample only among the most likely tokens whose probabilities add up to at least `topP` (default 1: all). */
  readonly topP?: number;
}

const KERNEL = 'generate';

function invalid(argument: string, expected: string, actual: unknown): never {
  throw new InvalidArgumentError(`${argument} is out of range`, {
    operation: KERNEL,
    argument,
    expected,
    actual: String(actual),
  });
}

/** Checks sampling options; a bad one is an InvalidArgumentError naming it. */
export function checkSamplingOptions(options: SamplingOptions): Required<SamplingOptions> {
  const temperature = options.temperature ?? 0;
  if (!Number.isFinite(temperature) || temperature < 0)
    invalid('temperature', 'a finite number >= 0', temperature);
  const topK = options.topK ?? Number.POSITIVE_INFINITY;
  if (!(topK === Number.POSITIVE_INFINITY || (Number.isInteger(topK) && topK >= 1)))
    invalid('topK', 'an integer >= 1', topK);
  const topP = options.topP ?? 1;
  if (!(topP > 0 && topP <= 1)) invalid('topP', 'a number in (0, 1]', topP);
  return { temperature, topK, topP };
}

function checkFinite(logits: Float32Array): void {
  const bad = logits.findIndex((v) => !Number.isFinite(v));
  if (bad >= 0) {
    throw new RayoError('the logits are not finite', {
      operation: KERNEL,
      argument: 'logits',
      expected: 'finite values',
      actual: `${logits[bad]} at token ${bad}`,
    });
  }
}

/**
 * The next token from one row of logits: the argmax at temperature 0;
 * otherwise a draw from softmax(logits / temperature) restricted to the
 * `topK` most likely tokens and then to the smallest most-likely set whose
 * probability reaches `topP` (renormalised), using `rng`.
 */
export function sampleToken(logits: Float32Array, options: Required<SamplingOptions>, rng: Rng): number {
  if (options.temperature === 0) {
    // One plain pass (no callbacks): this runs once per generated token.
    let best = 0;
    let top = logits[0]!;
    for (let i = 0; i < logits.length; i++) {
      const v = logits[i]!;
      if (v - v !== 0) checkFinite(logits);
      if (v > top) {
        top = v;
        best = i;
      }
    }
    return best;
  }
  checkFinite(logits);
  // Most likely first; equal logits keep id order, so a draw depends on the seed only.
  const order = Array.from(logits.keys()).sort((a, b) => logits[b]! - logits[a]! || a - b);
  const kept = order.slice(0, Math.min(order.length, options.topK));
  const top = logits[kept[0]!]!;
  const weights = kept.map((id) => Math.exp((logits[id]! - top) / options.temperature));
  const total = weights.reduce((a, b) => a + b, 0);
  let count = weights.length;
  if (options.topP < 1) {
    let cumulative = 0;
    count = 0;
    while (count < weights.length && cumulative < options.topP * total) cumulative += weights[count++]!;
  }
  const mass = weights.slice(0, count).reduce((a, b) => a + b, 0);
  let u = rng.next() * mass;
  for (let i = 0; i < count; i++) {
    u -= weights[i]!;
    if (u < 0) return kept[i]!;
  }
  return kept[count - 1]!;
}
