import { meta, random, runFirst as run } from '@rayo/core-testkit';
import { describe, expect, it } from 'vitest';
import { inferKernel } from '../kernelChecks.js';
import { Rng } from '../testing/random.js';
import { causalAttention } from './causalAttention.js';
import { incrementalAttention } from './decoding.js';

describe('causalAttention reference', () => {
  it('is, row by row, one decode step over the rows up to its own (grouped heads, later rows NaN)', () => {
    const rng = new Rng(7);
    const [tokens, nHeads, nKvHeads, headDim, position, maxSeq] = [4, 6, 2, 5, 3, 11];
    const q = random(rng, tokens * nHeads * headDim);
    const k = random(rng, nKvHeads * maxSeq * headDim);
    const v = random(rng, nKvHeads * maxSeq * headDim);
    // Rows past the chunk are never attended to: NaN there would poison any result that read them.
    for (let g = 0; g < nKvHeads; g++) {
      k.fill(Number.NaN, (g * maxSeq + position + tokens) * headDim, (g + 1) * maxSeq * headDim);
      v.fill(Number.NaN, (g * maxSeq + position + tokens) * headDim, (g + 1) * maxSeq * headDim);
    }
    const kv = [nKvHeads, maxSeq, headDim];
    const y = run(
      causalAttention,
      [
        { shape: [tokens, nHeads, headDim], data: q },
        { shape: kv, data: k },
        { shape: kv, data: v },
      ],
      { position, scale: 0.4 },
    );
    for (let t = 0; t < tokens; t++) {
      const row = q.subarray(t * nHeads * headDim, (t + 1) * nHeads * headDim);
      const step = run(
        incrementalAttention,
        [
          { shape: [nHeads, headDim], data: row },
          { shape: kv, data: k },
          { shape: kv, data: v },
        ],
        { seqLen: position + t + 1, scale: 0.4 },
      );
      expect([...y.subarray(t * nHeads * headDim, (t + 1) * nHeads * headDim)]).toEqual([...step]);
    }
  });

  it('counts the scores of a chunk in its cost', () => {
    const metas = [meta([3, 4, 8]), meta([2, 10, 8]), meta([2, 10, 8])];
    const { attrs } = inferKernel(causalAttention, metas, { position: 2 });
    // Rows attended: 3 + 4 + 5 = 12 per head.
    expect(causalAttention.cost!(metas, attrs).flops).toBe(4 * 12 * (4 * 8 + 3));
  });
});
