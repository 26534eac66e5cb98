import * as k from '../../kernels/causalAttention.js';
import { type FamilyCases, f32, invalidCalls, newFamilyCases, valid } from '../cases.js';
import { roundoffTolerance, UNIT_ROUNDOFF } from '../halfCases.js';
import { attentionInputs } from './decoding.js';

const { cases, errors } = newFamilyCases();

// Rows past position + T − 1 hold random values too: a kernel that reads
// them (or ignores the causal bound) fails.

/** Summing up to a few thousand weighted rows in f32: outputs are averages of values in [-1, 1). */
const ATTENTION_TOLERANCE = { rtol: 1e-4, atol: 2e-5 } as const;

// [T, nHeads, nKvHeads, headDim, position, maxSeq]: odd lengths, tile
// boundaries (63/64/65, 127/128/129), a first chunk (position 0) and later
// chunks, GQA ratios 1, 3, 4 and 8, head dims 1, 7, 64, 80 and 128.
const CHUNKS: readonly (readonly [number, number, number, number, number, number])[] = [
  [1, 1, 1, 1, 0, 1],
  [2, 1, 1, 7, 0, 2],
  [5, 3, 1, 7, 0, 13],
  [5, 3, 3, 7, 8, 13],
  [63, 4, 1, 64, 0, 63],
  [64, 8, 2, 64, 0, 100],
  [65, 8, 2, 64, 35, 100],
  [127, 4, 4, 128, 0, 127],
  [129, 8, 1, 128, 0, 129],
  [128, 4, 1, 128, 128, 300],
  [37, 6, 2, 80, 200, 257],
  [200, 32, 8, 64, 0, 200],
  [300, 2, 1, 128, 17, 400],
  [1, 8, 2, 128, 2000, 2048],
  [17, 8, 8, 64, 1014, 1031],
];

for (const [tokens, nHeads, nKvHeads, headDim, position, maxSeq] of CHUNKS) {
  const kv = f32([nKvHeads, maxSeq, headDim]);
  cases.push(
    valid(k.causalAttention, {
      label: `${tokens} tokens at ${position}, ${nHeads} heads / ${nKvHeads} kv heads, headDim ${headDim}, cache ${maxSeq}`,
      inputs: [f32([tokens, nHeads, headDim]), kv, kv],
      attrs: { position },
      tolerance: ATTENTION_TOLERANCE,
    }),
  );
}

cases.push(
  valid(k.causalAttention, {
    label: 'explicit scale 0.5, 9 tokens at 4, 3 heads / 3, headDim 7, cache 61',
    inputs: [f32([9, 3, 7]), f32([3, 61, 7]), f32([3, 61, 7])],
    attrs: { position: 4, scale: 0.5 },
    tolerance: ATTENTION_TOLERANCE,
  }),
  // Scores in the hundreds: exp overflows f32 unless the running max is subtracted.
  valid(k.causalAttention, {
    label: 'large scores (scale 4, wide q), 70 tokens at 0, 8 heads / 2, headDim 64, cache 70',
    inputs: [f32([70, 8, 64], 'wide'), f32([2, 70, 64]), f32([2, 70, 64])],
    attrs: { position: 0, scale: 4 },
    tolerance: { rtol: 1e-3, atol: 1e-4 },
  }),
);

// attrs.out: attention writes the o product's bf16 operand itself; over
// bf16 caches with head dims 64 (tensor cores) and 7 (the tile kernel).
for (const [tokens, nHeads, nKvHeads, headDim, position, maxSeq] of [
  [37, 4, 2, 64, 5, 50],
  [9, 3, 1, 7, 4, 17],
] as const) {
  const kv = { shape: [nKvHeads, maxSeq, headDim], dtype: 'bf16' } as const;
  const inputs = [f32([tokens, nHeads, headDim]), kv, kv];
  cases.push(
    valid(k.causalAttention, {
      label: `${tokens} tokens at ${position}, ${nHeads} heads / ${nKvHeads}, headDim ${headDim}, bf16 cache ${maxSeq}, out bf16`,
      inputs,
      attrs: { position, out: 'bf16' },
      tolerance: roundoffTolerance(UNIT_ROUNDOFF.bf16, { inputs, tolerance: ATTENTION_TOLERANCE }),
    }),
  );
}

errors.push(
  ...invalidCalls(k.causalAttention, [
    ['q of rank 2', attentionInputs([4, 8], [2, 5, 4]), 'shape', 'q', { position: 0 }],
    ['kCache of rank 2', attentionInputs([2, 2, 4], [5, 4]), 'shape', 'kCache', { position: 0 }],
    [
      'kv heads not dividing the heads',
      attentionInputs([2, 3, 4], [2, 5, 4]),
      'shape',
      'kCache',
      { position: 0 },
    ],
    ['a headDim other than q’s', attentionInputs([2, 2, 4], [2, 5, 3]), 'shape', 'kCache', { position: 0 }],
    [
      'vCache of another shape',
      attentionInputs([2, 2, 4], [2, 5, 4], [2, 6, 4]),
      'shape',
      'vCache',
      { position: 0 },
    ],
    [
      'a chunk past the cache',
      attentionInputs([3, 2, 4], [2, 5, 4]),
      'argument',
      'attrs.position',
      { position: 3 },
    ],
    [
      'a negative position',
      attentionInputs([3, 2, 4], [2, 5, 4]),
      'argument',
      'attrs.position',
      { position: -1 },
    ],
  ]),
);

export const causalAttentionCases: FamilyCases = { cases, errors };
