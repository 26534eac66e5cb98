import { InvalidArgumentError, RayoError } from '@rayo/core';
import { describe, expect, it } from 'vitest';
import { Rng } from '../random.js';
import { checkSamplingOptions, type SamplingOptions, sampleToken } from './sampling.js';

const LOGITS = Float32Array.of(0.5, 2, -1, 2, 1.5, 0, -3, 1);

function draws(options: SamplingOptions, seed: number, count = 2000, logits = LOGITS): number[] {
  const rng = new Rng(seed);
  const checked = checkSamplingOptions(options);
  return Array.from({ length: count }, () => sampleToken(logits, checked, rng));
}

function frequencies(tokens: number[]): Map<number, number> {
  const counts = new Map<number, number>();
  for (const t of tokens) counts.set(t, (counts.get(t) ?? 0) + 1 / tokens.length);
  return counts;
}

describe('sampleToken', () => {
  it('is greedy at temperature 0, taking the lowest id on a tie', () => {
    expect(new Set(draws({}, 1, 50))).toEqual(new Set([1]));
    expect(new Set(draws({ temperature: 0, topK: 3, topP: 0.5 }, 2, 50))).toEqual(new Set([1]));
  });

  it('gives the same tokens for the same seed and other tokens for another seed', () => {
    const options = { temperature: 1.3 };
    expect(draws(options, 7, 200)).toEqual(draws(options, 7, 200));
    expect(draws(options, 7, 200)).not.toEqual(draws(options, 8, 200));
  });

  it('draws from softmax(logits / temperature)', () => {
    // Logits (0, ln 3) at temperature 1 are probabilities (1/4, 3/4); at temperature 2, (1/(1+√3), √3/(1+√3)).
    const two = Float32Array.of(0, Math.log(3));
    expect(frequencies(draws({ temperature: 1 }, 3, 4000, two)).get(1)).toBeCloseTo(0.75, 1);
    const hot = frequencies(draws({ temperature: 2 }, 3, 4000, two)).get(1)!;
    expect(Math.abs(hot - Math.sqrt(3) / (1 + Math.sqrt(3)))).toBeLessThan(0.03);
  });

  it('keeps only the topK most likely tokens', () => {
    expect(new Set(draws({ temperature: 5, topK: 1 }, 4))).toEqual(new Set([1]));
    // Ids 1 and 3 tie at the top; id 4 is third.
    expect(new Set(draws({ temperature: 5, topK: 3 }, 4))).toEqual(new Set([1, 3, 4]));
    expect(new Set(draws({ temperature: 5 }, 4)).size).toBe(LOGITS.length);
  });

  it('keeps the smallest most-likely set whose probability reaches topP', () => {
    // At temperature 1: p(1) = p(3) ≈ 0.30, p(4) ≈ 0.18, p(7) ≈ 0.11, …
    expect(new Set(draws({ temperature: 1, topP: 0.25 }, 5))).toEqual(new Set([1]));
    expect(new Set(draws({ temperature: 1, topP: 0.55 }, 5))).toEqual(new Set([1, 3]));
    expect(new Set(draws({ temperature: 1, topP: 0.7 }, 5))).toEqual(new Set([1, 3, 4]));
    expect(new Set(draws({ temperature: 1, topK: 2, topP: 0.99 }, 5))).toEqual(new Set([1, 3]));
  });

  it('names a bad option and refuses non-finite logits', () => {
    for (const [options, argument] of [
      [{ temperature: -1 }, 'temperature'],
      [{ temperature: Number.NaN }, 'temperature'],
      [{ topK: 0 }, 'topK'],
      [{ topK: 1.5 }, 'topK'],
      [{ topP: 0 }, 'topP'],
      [{ topP: 1.5 }, 'topP'],
    ] as const) {
      expect(() => checkSamplingOptions(options)).toThrow(InvalidArgumentError);
      expect(() => checkSamplingOptions(options)).toThrow(new RegExp(`'?${argument}`));
    }
    expect(() => sampleToken(Float32Array.of(1, Number.NaN), checkSamplingOptions({}), new Rng(0))).toThrow(
      RayoError,
    );
  });
});
