import * as k from '../../kernels/flashAttention.js';
import { type FamilyCases, f32, invalidCalls, newFamilyCases, valid } from '../cases.js';
import { mistypedAttr } from '../mistypedAttr.js';
import type { Rng } from '../random.js';

const { cases, errors } = newFamilyCases();

/** Sums of up to 65 · 4 products in f32 against the f64 reference. */
const TOLERANCE = { rtol: 1e-4, atol: 5e-5 } as const;

// [T, B, nHeads, nKvHeads, headDim]: odd lengths (1, 17, 65: one, part of
// and past a 64-row tile), batch 1 and 2, GQA 4:1 and 1:1, head dims 64
// and 7 (two only: each is a shader a software adapter compiles slowly). The backward's out, dOut and lse are random: its formula holds
// for any of them, and a kernel that recomputes them differently fails.
const SHAPES: readonly (readonly [number, number, number, number, number])[] = [
  [1, 1, 4, 1, 64],
  [17, 2, 3, 3, 7],
  [65, 2, 8, 2, 64],
  [33, 1, 4, 1, 7],
];

for (const [tokens, batch, nHeads, nKvHeads, headDim] of SHAPES) {
  const q = f32([tokens, batch, nHeads, headDim]);
  const kv = f32([tokens, batch, nKvHeads, headDim]);
  const label = `T ${tokens}, batch ${batch}, ${nHeads} heads / ${nKvHeads} kv heads, headDim ${headDim}`;
  cases.push(
    valid(k.flashAttention, { label, inputs: [q, kv, kv], tolerance: TOLERANCE }),
    valid(k.flashAttentionBackward, {
      label,
      inputs: [q, kv, kv, q, q, f32([tokens, batch, nHeads])],
      tolerance: TOLERANCE,
    }),
  );
}

// precision 'half': the reference rounds q, k, v and dOut to bf16; a backend
// may also round the probabilities and dS (relative 2^-9 each, averaged over
// the keys), or keep f32 (exact), so the bound is bf16's, loosened for sums.
// The backward's lse is drawn from [2, 4], about a softmax denominator's
// log over these lengths, so that P stays below 1 as it does in training:
// on a random lse P reaches e^3, and its rounding swamps any bound.
const HALF_TOLERANCE = { rtol: 2e-2, atol: 1e-2 } as const;
const lseLike = (rng: Rng, size: number) => Array.from({ length: size }, () => rng.uniform(2, 4));
const HALF_SHAPES: readonly (readonly [number, number, number, number, number])[] = [
  [65, 2, 4, 2, 64],
  [17, 3, 2, 2, 128],
];
for (const [tokens, batch, nHeads, nKvHeads, headDim] of HALF_SHAPES) {
  const q = f32([tokens, batch, nHeads, headDim]);
  const kv = f32([tokens, batch, nKvHeads, headDim]);
  const label = `precision half, T ${tokens}, batch ${batch}, ${nHeads} heads / ${nKvHeads} kv heads, headDim ${headDim}`;
  const attrs = { precision: 'half' } as const;
  cases.push(
    valid(k.flashAttention, { label, inputs: [q, kv, kv], attrs, tolerance: HALF_TOLERANCE }),
    valid(k.flashAttentionBackward, {
      label,
      inputs: [q, kv, kv, q, q, f32([tokens, batch, nHeads], lseLike)],
      attrs,
      tolerance: HALF_TOLERANCE,
    }),
  );
}

cases.push(
  // Scores in the tens: exp overflows f32 unless the running max is subtracted.
  valid(k.flashAttention, {
    label: 'large scores (scale 2, wide q), T 40, batch 1, 4 heads / 1, headDim 64',
    inputs: [f32([40, 1, 4, 64], 'wide'), f32([40, 1, 1, 64]), f32([40, 1, 1, 64])],
    attrs: { scale: 2 },
    tolerance: { rtol: 1e-3, atol: 1e-4 },
  }),
);

const qkv = (q: number[], kv: number[], v: number[] = kv) => [f32(q), f32(kv), f32(v)];

errors.push(
  ...invalidCalls(k.flashAttention, [
    ['q of rank 3', qkv([4, 6, 8], [4, 1, 3, 8]), 'shape', 'q'],
    ['kv heads not dividing the heads', qkv([4, 1, 6, 8], [4, 1, 4, 8]), 'shape', 'k'],
    ['k of another length', qkv([4, 1, 6, 8], [5, 1, 3, 8]), 'shape', 'k'],
    ['v of another shape', qkv([4, 1, 6, 8], [4, 1, 3, 8], [4, 1, 3, 7]), 'shape', 'v'],
    ['a negative scale', qkv([4, 1, 6, 8], [4, 1, 3, 8]), 'argument', 'attrs.scale', { scale: -1 }],
    mistypedAttr("precision 'tf32'", qkv([4, 1, 6, 8], [4, 1, 3, 8]), 'precision', 'tf32'),
  ]),
  ...invalidCalls(k.flashAttentionBackward, [
    [
      'lse without the batch axis',
      [...qkv([4, 1, 6, 8], [4, 1, 3, 8]), f32([4, 1, 6, 8]), f32([4, 1, 6, 8]), f32([4, 6])],
      'shape',
      'lse',
    ],
    [
      'dOut of another shape',
      [...qkv([4, 1, 6, 8], [4, 1, 3, 8]), f32([4, 1, 6, 8]), f32([4, 1, 6, 7]), f32([4, 1, 6])],
      'shape',
      'dOut',
    ],
  ]),
);

export const flashAttentionCases: FamilyCases = { cases, errors };
