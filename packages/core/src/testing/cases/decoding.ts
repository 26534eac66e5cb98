import * as k from '../../kernels/decoding.js';
import { ropeAttention } from '../../kernels/ropeAttention.js';
import type { Shape } from '../../shape.js';
import { deviceValue, type FamilyCases, f32, i32, invalidCalls, newFamilyCases, valid } from '../cases.js';
import { frequencyTable, ROPE_LAYOUTS, type RopeLayout, ropeTolerance } from '../ropeInputs.js';

const { cases, errors } = newFamilyCases();

// ---- kvCacheScatter --------------------------------------------------------
// The cache starts random, so a kernel that writes any other row, or clears
// the cache, changes the result.

/** [nHeads, maxSeq, headDim, T, position] of a kvCacheScatter case. */
type Scatter = readonly [number, number, number, number, number];

// T = 1 as a rank-1 row and as [1, …].
const SCATTERS: readonly Scatter[] = [
  [1, 1, 1, 1, 0],
  [3, 13, 7, 1, 0],
  [3, 13, 7, 1, 12],
  [3, 13, 7, 5, 0],
  [3, 13, 7, 5, 8],
  [8, 67, 64, 1, 0],
  [8, 67, 64, 1, 66],
  [8, 67, 64, 5, 31],
  [8, 67, 64, 5, 62],
  [32, 61, 128, 1, 60],
  [32, 61, 128, 5, 0],
  [2, 1031, 128, 5, 1026],
  [1, 4096, 1, 5, 4091],
];

for (const [nHeads, maxSeq, headDim, tokens, position] of SCATTERS) {
  const width = nHeads * headDim;
  const cache = f32([nHeads, maxSeq, headDim]);
  const where = `cache [${nHeads}, ${maxSeq}, ${headDim}] at ${position}`;
  if (tokens === 1) {
    cases.push(
      valid(k.kvCacheScatter, {
        label: `one row [${width}] into ${where}`,
        inputs: [cache, f32([width])],
        attrs: { position },
      }),
    );
  }
  cases.push(
    valid(k.kvCacheScatter, {
      label: `${tokens} row(s) [${tokens}, ${width}] into ${where}`,
      inputs: [cache, f32([tokens, width])],
      attrs: { position },
    }),
  );
}

// The position read from a device tensor: the first row, odd rows, the last.
const DEVICE_SCATTERS: readonly Scatter[] = [
  [1, 1, 1, 1, 0],
  [3, 13, 7, 1, 12],
  [3, 13, 7, 5, 3],
  [3, 13, 7, 13, 0],
  [8, 67, 64, 1, 33],
  [8, 67, 64, 5, 62],
  [2, 1031, 128, 1, 1029],
];
for (const [nHeads, maxSeq, headDim, tokens, position] of DEVICE_SCATTERS) {
  const width = nHeads * headDim;
  const where = `cache [${nHeads}, ${maxSeq}, ${headDim}] at a device position ${position}`;
  cases.push(
    valid(k.kvCacheScatter, {
      label: `${tokens} row(s) [${tokens}, ${width}] into ${where}`,
      inputs: [f32([nHeads, maxSeq, headDim]), f32([tokens, width]), deviceValue(position)],
    }),
  );
  if (tokens === 1) {
    cases.push(
      valid(k.kvCacheScatter, {
        label: `one row [${width}] into ${where}`,
        inputs: [f32([nHeads, maxSeq, headDim]), f32([width]), deviceValue(position)],
      }),
    );
  }
}

errors.push(
  ...invalidCalls(k.kvCacheScatter, [
    [
      'a device position and attrs.position both',
      [f32([2, 8, 4]), f32([8]), deviceValue(2)],
      'argument',
      'attrs.position',
      { position: 2 },
    ],
    ['a device position of shape [1, 1]', [f32([2, 8, 4]), f32([8]), i32([1, 1], 0, 4)], 'shape', 'position'],
    [
      'a u32 device position',
      [f32([2, 8, 4]), f32([8]), { shape: [1], dtype: 'u32', init: () => [1] }],
      'dtype',
      'position',
    ],
    [
      'more rows than the cache holds, with a device position',
      [f32([2, 8, 4]), f32([9, 8]), deviceValue(0)],
      'shape',
      'values',
    ],
    ['cache of rank 2', [f32([4, 8]), f32([8])], 'shape', 'cache', { position: 0 }],
    ['values of rank 3', [f32([2, 8, 4]), f32([1, 1, 8])], 'shape', 'values', { position: 0 }],
    [
      'values row of headDim instead of nHeads · headDim',
      [f32([2, 8, 4]), f32([3, 4])],
      'shape',
      'values',
      { position: 0 },
    ],
    ['position missing', [f32([2, 8, 4]), f32([8])], 'argument', 'attrs.position', {}],
    ['position negative', [f32([2, 8, 4]), f32([8])], 'argument', 'attrs.position', { position: -1 }],
    ['position not an integer', [f32([2, 8, 4]), f32([8])], 'argument', 'attrs.position', { position: 1.5 }],
    ['one row at position maxSeq', [f32([2, 8, 4]), f32([8])], 'argument', 'attrs.position', { position: 8 }],
    [
      '3 rows at position maxSeq − 2',
      [f32([2, 8, 4]), f32([3, 8])],
      'argument',
      'attrs.position',
      { position: 6 },
    ],
  ]),
);

// ---- incrementalAttention ------------------------------------------------------
// Rows past seqLen hold random values too: a kernel that reads them fails.

/** Summing seqLen weighted rows in f32: the outputs are averages of values in [-1, 1). */
const ATTENTION_TOLERANCE = { rtol: 1e-4, atol: 1e-5 } as const;

/** [nHeads, nKvHeads, headDim, seqLen, maxSeq] of an incrementalAttention case. */
type Attention = readonly [number, number, number, number, number];

const ATTENTION: readonly Attention[] = [
  [1, 1, 1, 1, 1],
  [1, 1, 7, 5, 5],
  [3, 3, 7, 5, 13],
  [3, 1, 7, 67, 67],
  [1, 1, 1, 1031, 1031],
  [8, 2, 64, 67, 100],
  [8, 8, 64, 1, 67],
  [8, 2, 128, 1031, 1031],
  [32, 8, 128, 5, 67],
  [32, 32, 64, 67, 257],
  [32, 8, 128, 4096, 4096],
  [3, 3, 128, 1031, 4096],
  // Pairs of heads sharing a kv head over 64 chunks (the last one partial).
  [16, 8, 64, 4093, 4096],
];

for (const [nHeads, nKvHeads, headDim, seqLen, maxSeq] of ATTENTION) {
  const kv = f32([nKvHeads, maxSeq, headDim]);
  cases.push(
    valid(k.incrementalAttention, {
      label: `${nHeads} heads / ${nKvHeads} kv heads, headDim ${headDim}, seqLen ${seqLen} of ${maxSeq}`,
      inputs: [f32([nHeads, headDim]), kv, kv],
      attrs: { seqLen },
      tolerance: ATTENTION_TOLERANCE,
    }),
  );
}

cases.push(
  valid(k.incrementalAttention, {
    label: 'explicit scale 0.5, 3 heads / 3, headDim 7, seqLen 13 of 61',
    inputs: [f32([3, 7]), f32([3, 61, 7]), f32([3, 61, 7])],
    attrs: { seqLen: 13, scale: 0.5 },
    tolerance: ATTENTION_TOLERANCE,
  }),
  // Scores in the hundreds: exp overflows f32 unless the max is subtracted. The
  // tolerance is looser because f32 score errors are scaled up by 4.
  valid(k.incrementalAttention, {
    label: 'large scores (scale 4, wide q), 8 heads / 2, headDim 64, seqLen 67 of 67',
    inputs: [f32([8, 64], 'wide'), f32([2, 67, 64]), f32([2, 67, 64])],
    attrs: { seqLen: 67, scale: 4 },
    tolerance: { rtol: 1e-3, atol: 1e-4 },
  }),
);

// The length read from a device tensor: 1, odd lengths, the full capacity,
// and short lengths of long caches (most of a split grid past the length).
const DEVICE_ATTENTION: readonly Attention[] = [
  [1, 1, 1, 1, 1],
  [3, 3, 7, 1, 13],
  [3, 1, 7, 13, 13],
  [8, 2, 64, 67, 100],
  [8, 8, 64, 1, 1031],
  [6, 2, 10, 37, 1031],
  [8, 2, 128, 1031, 1031],
  [32, 8, 128, 5, 4096],
  [3, 3, 128, 4096, 4096],
  [2, 1, 64, 2049, 4096],
];
for (const [nHeads, nKvHeads, headDim, seqLen, maxSeq] of DEVICE_ATTENTION) {
  const kv = f32([nKvHeads, maxSeq, headDim]);
  cases.push(
    valid(k.incrementalAttention, {
      label: `${nHeads} heads / ${nKvHeads} kv heads, headDim ${headDim}, device seqLen ${seqLen} of ${maxSeq}`,
      inputs: [f32([nHeads, headDim]), kv, kv, deviceValue(seqLen)],
      tolerance: ATTENTION_TOLERANCE,
    }),
  );
}

/** q and the two caches an attention kernel reads; vCache is kCache's shape unless given. */
export const attentionInputs = (q: Shape, kCache: Shape, vCache: Shape = kCache) => [
  f32(q),
  f32(kCache),
  f32(vCache),
];

errors.push(
  ...invalidCalls(k.incrementalAttention, [
    [
      'a device seqLen and attrs.seqLen both',
      [...attentionInputs([2, 4], [2, 5, 4]), deviceValue(3)],
      'argument',
      'attrs.seqLen',
      { seqLen: 3 },
    ],
    [
      'a device seqLen of shape [3]',
      [...attentionInputs([2, 4], [2, 5, 4]), i32([3], 1, 5)],
      'shape',
      'seqLen',
    ],
    [
      'an f32 device seqLen',
      [...attentionInputs([2, 4], [2, 5, 4]), { shape: [1], dtype: 'f32' }],
      'dtype',
      'seqLen',
    ],
    [
      'a cache of no rows, with a device seqLen',
      [...attentionInputs([2, 4], [2, 0, 4]), deviceValue(1)],
      'shape',
      'kCache',
    ],
    ['q of rank 1', attentionInputs([8], [2, 5, 4]), 'shape', 'q', { seqLen: 3 }],
    ['kCache of rank 2', attentionInputs([2, 4], [5, 4]), 'shape', 'kCache', { seqLen: 3 }],
    [
      'headDim of kCache (5) != headDim of q (4)',
      attentionInputs([2, 4], [2, 5, 5]),
      'shape',
      'kCache',
      { seqLen: 3 },
    ],
    ['8 heads over 3 kv heads', attentionInputs([8, 4], [3, 5, 4]), 'shape', 'kCache', { seqLen: 3 }],
    ['more kv heads than heads', attentionInputs([2, 4], [4, 5, 4]), 'shape', 'kCache', { seqLen: 3 }],
    [
      'vCache of another maxSeq',
      attentionInputs([2, 4], [2, 5, 4], [2, 6, 4]),
      'shape',
      'vCache',
      { seqLen: 3 },
    ],
    ['seqLen past maxSeq', attentionInputs([2, 4], [2, 5, 4]), 'argument', 'attrs.seqLen', { seqLen: 6 }],
    ['seqLen 0', attentionInputs([2, 4], [2, 5, 4]), 'argument', 'attrs.seqLen', { seqLen: 0 }],
    ['seqLen missing', attentionInputs([2, 4], [2, 5, 4]), 'argument', 'attrs.seqLen', {}],
    [
      'negative scale',
      attentionInputs([2, 4], [2, 5, 4]),
      'argument',
      'attrs.scale',
      { seqLen: 3, scale: -1 },
    ],
  ]),
);

// ---- ropeKvScatter -----------------------------------------------------------
// Random caches again, so a write to any other row shows; q, k and v random.

/** [T, heads, kvHeads, headDim, maxSeq, position] of a ropeKvScatter case. */
type RopeScatter = readonly [number, number, number, number, number, number];

/**
 * A ropeKvScatter case: k and v as rows [T, kvHeads·headDim], k by head
 * [T, kvHeads, headDim], or q, k and v fused in one input; the position on
 * the device or as the attribute; with a frequency table or theta's.
 */
function ropeScatterCase(
  [tokens, heads, kvHeads, headDim, maxSeq, position]: RopeScatter,
  layout: RopeLayout,
  { onDevice, table, kv }: { onDevice: boolean; table: boolean; kv: 'rows' | 'byHead' | 'fused' },
) {
  const width = kvHeads * headDim;
  const cache = f32([kvHeads, maxSeq, headDim]);
  const kShape = kv === 'byHead' ? [tokens, kvHeads, headDim] : [tokens, width];
  const qkv =
    kv === 'fused'
      ? [f32([tokens, heads + 2 * kvHeads, headDim]), undefined, undefined]
      : [f32([tokens, heads, headDim]), f32(kShape), f32([tokens, width])];
  const at = onDevice ? deviceValue(position) : undefined;
  const tail = table ? [at, frequencyTable(headDim)] : onDevice ? [at] : [];
  // Only the cases of theta's frequencies vary k's layout, so only their labels name it.
  const q =
    kv === 'fused'
      ? `fused q, k, v [${tokens}, ${heads} + 2·${kvHeads}, ${headDim}]`
      : `q [${tokens}, ${heads}, ${headDim}]${table ? '' : `, k [${kShape.join(', ')}]`}`;
  return valid(k.ropeKvScatter, {
    label: `${layout}${table ? ' with a frequency table' : ''}: ${q} into caches [${kvHeads}, ${maxSeq}, ${headDim}] at ${onDevice ? 'a device position ' : ''}${position}`,
    inputs: [...qkv, cache, cache, ...tail],
    attrs: onDevice ? { layout } : { position, layout },
    tolerance: ropeTolerance(position + tokens - 1),
  });
}

// [shape, device position, k as [T, kvHeads, headDim]], each in both layouts.
const ROPE_SCATTERS: readonly (readonly [RopeScatter, boolean, boolean])[] = [
  [[1, 1, 1, 2, 1, 0], false, false],
  [[1, 3, 1, 6, 13, 0], false, true],
  [[1, 3, 1, 6, 13, 12], false, false],
  [[5, 4, 2, 14, 13, 8], false, true],
  [[5, 7, 7, 10, 13, 0], false, false],
  [[1, 32, 8, 64, 67, 66], false, false],
  [[3, 32, 8, 128, 61, 58], false, true],
  [[1, 1, 1, 2, 1, 0], true, false],
  [[1, 3, 1, 6, 13, 12], true, true],
  [[5, 4, 2, 14, 13, 3], true, false],
  [[13, 2, 1, 6, 13, 0], true, false],
  [[1, 32, 8, 64, 2048, 2047], true, false],
];
for (const layout of ROPE_LAYOUTS) {
  for (const [shape, onDevice, kByHead] of ROPE_SCATTERS) {
    cases.push(ropeScatterCase(shape, layout, { onDevice, table: false, kv: kByHead ? 'byHead' : 'rows' }));
  }
}
cases.push(
  valid(k.ropeKvScatter, {
    label: 'theta 500000 at position 1000',
    inputs: [f32([1, 4, 64]), f32([1, 2, 64]), f32([1, 128]), f32([2, 1031, 64]), f32([2, 1031, 64])],
    attrs: { position: 1000, theta: 500000 },
    tolerance: ropeTolerance(1000),
  }),
);

// With a frequency table (scaled RoPE): theta's frequencies unused. [shape, device position].
const TABLE_SCATTERS: readonly (readonly [RopeScatter, boolean])[] = [
  [[1, 1, 1, 2, 1, 0], false],
  [[1, 3, 1, 6, 13, 12], true],
  [[5, 4, 2, 14, 13, 8], false],
  [[3, 32, 8, 128, 61, 58], false],
  [[1, 32, 8, 64, 2048, 2047], true],
];
for (const layout of ROPE_LAYOUTS) {
  for (const [shape, onDevice] of TABLE_SCATTERS) {
    cases.push(ropeScatterCase(shape, layout, { onDevice, table: true, kv: 'rows' }));
  }
}

// q, k and v fused in one input [T, heads + 2·kvHeads, headDim], as one product of a layer writes them.
// [shape, device position, layout, frequency table].
const FUSED_SCATTERS: readonly (readonly [RopeScatter, boolean, RopeLayout, boolean])[] = [
  [[1, 1, 1, 2, 1, 0], false, 'half', false],
  [[1, 3, 1, 6, 13, 12], true, 'half', false],
  [[5, 4, 2, 14, 13, 8], false, 'interleaved', false],
  [[7, 3, 3, 10, 11, 3], false, 'half', true],
  [[3, 32, 8, 64, 61, 58], true, 'half', true],
];
for (const [shape, onDevice, layout, table] of FUSED_SCATTERS) {
  cases.push(ropeScatterCase(shape, layout, { onDevice, table, kv: 'fused' }));
}

const Q = f32([2, 4, 6]);
const K = f32([2, 12]);
const CACHE = f32([2, 8, 6]);
errors.push(
  ...invalidCalls(k.ropeKvScatter, [
    [
      'odd headDim',
      [f32([2, 4, 5]), f32([2, 10]), f32([2, 10]), f32([2, 8, 5]), f32([2, 8, 5])],
      'shape',
      'q',
      { position: 0 },
    ],
    ['q of rank 2', [f32([4, 6]), f32([1, 12]), f32([1, 12]), CACHE, CACHE], 'shape', 'q', { position: 0 }],
    [
      'kCache headDim differing from q',
      [Q, K, K, f32([2, 8, 4]), f32([2, 8, 4])],
      'shape',
      'kCache',
      { position: 0 },
    ],
    [
      'vCache shape differing from kCache',
      [Q, K, K, CACHE, f32([2, 9, 6])],
      'shape',
      'vCache',
      { position: 0 },
    ],
    ['k with another token count', [Q, f32([3, 12]), K, CACHE, CACHE], 'shape', 'k', { position: 0 }],
    ['v of [T, kvHeads, headDim]', [Q, K, f32([2, 2, 6]), CACHE, CACHE], 'shape', 'v', { position: 0 }],
    [
      'rows past the cache at attrs.position',
      [Q, K, K, CACHE, CACHE],
      'argument',
      'attrs.position',
      { position: 7 },
    ],
    [
      'more rows than the cache holds, with a device position',
      [f32([9, 4, 6]), f32([9, 12]), f32([9, 12]), CACHE, CACHE, deviceValue(0)],
      'shape',
      'q',
    ],
    [
      'a device position and attrs.position both',
      [Q, K, K, CACHE, CACHE, deviceValue(1)],
      'argument',
      'attrs.position',
      { position: 1 },
    ],
    ['position missing', [Q, K, K, CACHE, CACHE], 'argument', 'attrs.position', {}],
    ['k without v', [Q, K, undefined, CACHE, CACHE], 'shape', 'v', { position: 0 }],
    ['v without k', [Q, undefined, K, CACHE, CACHE], 'shape', 'k', { position: 0 }],
    [
      'fused q, k, v without a q head',
      [f32([2, 4, 6]), undefined, undefined, CACHE, CACHE],
      'shape',
      'q',
      { position: 0 },
    ],
    [
      'a frequency table of headDim entries',
      [Q, K, K, CACHE, CACHE, undefined, f32([6])],
      'shape',
      'frequencies',
      { position: 0 },
    ],
    [
      'a bf16 frequency table',
      [Q, K, K, CACHE, CACHE, undefined, { shape: [3], dtype: 'bf16' }],
      'dtype',
      'frequencies',
      { position: 0 },
    ],
    [
      'a u32 device position',
      [Q, K, K, CACHE, CACHE, { shape: [1], dtype: 'u32', init: () => [1] }],
      'dtype',
      'position',
    ],
  ]),
);

// ---- ropeAttention ---------------------------------------------------------------
// Random caches, rows past the position included: a kernel that attends past the
// new row, writes another row, or reads the cache's old row at the position fails.

/** [heads, kvHeads, headDim, maxSeq, position] of a ropeAttention case. */
type RopeAttention = readonly [number, number, number, number, number];

// [shape, device position, layout, frequency table]: the last row, GQA groups of 1 to 8, the
// head dimensions of the tensor-core kernels (64, 128), a short sequence in a long cache.
const ROPE_ATTENTION: readonly (readonly [RopeAttention, boolean, RopeLayout, boolean])[] = [
  [[1, 1, 2, 1, 0], false, 'half', false],
  [[3, 1, 6, 13, 12], true, 'half', false],
  [[4, 2, 14, 13, 8], false, 'interleaved', false],
  [[3, 3, 10, 11, 3], false, 'half', true],
  [[8, 2, 64, 100, 66], true, 'half', false],
  [[8, 1, 64, 67, 0], true, 'interleaved', false],
  [[6, 2, 10, 1031, 37], true, 'half', false],
  [[8, 2, 64, 4096, 5], true, 'half', false],
  [[32, 8, 128, 1031, 1000], true, 'interleaved', false],
  [[32, 8, 64, 2048, 2047], true, 'half', true],
  [[16, 2, 128, 300, 129], false, 'half', true],
];
for (const [[heads, kvHeads, headDim, maxSeq, position], onDevice, layout, table] of ROPE_ATTENTION) {
  const cache = f32([kvHeads, maxSeq, headDim]);
  const at = onDevice ? deviceValue(position) : undefined;
  const tail = table ? [at, frequencyTable(headDim)] : onDevice ? [at] : [];
  cases.push(
    valid(ropeAttention, {
      label: `${layout}${table ? ' with a frequency table' : ''}: ${heads} heads / ${kvHeads} kv heads, headDim ${headDim}, at ${onDevice ? 'a device position ' : ''}${position} of ${maxSeq}`,
      inputs: [f32([heads + 2 * kvHeads, headDim]), cache, cache, ...tail],
      attrs: onDevice ? { layout } : { position, layout },
      tolerance: ATTENTION_TOLERANCE,
    }),
  );
}
cases.push(
  valid(ropeAttention, {
    label: 'theta 500000 and scale 0.25 at position 1000, 4 heads / 2, headDim 64',
    inputs: [f32([8, 64]), f32([2, 1031, 64]), f32([2, 1031, 64])],
    attrs: { position: 1000, theta: 500000, scale: 0.25 },
    tolerance: ATTENTION_TOLERANCE,
  }),
);

const QKV = f32([8, 6]);
const KV_CACHE = f32([2, 8, 6]);
errors.push(
  ...invalidCalls(ropeAttention, [
    ['qkv of rank 3', [f32([1, 8, 6]), KV_CACHE, KV_CACHE], 'shape', 'qkv', { position: 0 }],
    ['odd headDim', [f32([8, 5]), f32([2, 8, 5]), f32([2, 8, 5])], 'shape', 'qkv', { position: 0 }],
    ['no q head', [f32([4, 6]), KV_CACHE, KV_CACHE], 'shape', 'qkv', { position: 0 }],
    ['3 heads over 2 kv heads', [f32([7, 6]), KV_CACHE, KV_CACHE], 'shape', 'kCache', { position: 0 }],
    ['kCache headDim differing', [QKV, f32([2, 8, 4]), f32([2, 8, 4])], 'shape', 'kCache', { position: 0 }],
    ['vCache shape differing', [QKV, KV_CACHE, f32([2, 9, 6])], 'shape', 'vCache', { position: 0 }],
    ['position past the cache', [QKV, KV_CACHE, KV_CACHE], 'argument', 'attrs.position', { position: 8 }],
    ['position missing', [QKV, KV_CACHE, KV_CACHE], 'argument', 'attrs.position', {}],
    [
      'a device position and attrs.position both',
      [QKV, KV_CACHE, KV_CACHE, deviceValue(1)],
      'argument',
      'attrs.position',
      { position: 1 },
    ],
    [
      'a frequency table of headDim entries',
      [QKV, KV_CACHE, KV_CACHE, undefined, f32([6])],
      'shape',
      'frequencies',
      { position: 0 },
    ],
    ['negative scale', [QKV, KV_CACHE, KV_CACHE], 'argument', 'attrs.scale', { position: 0, scale: -1 }],
  ]),
);

export const decodingCases: FamilyCases = { cases, errors };
