import type { HostArray } from '../dtype.js';
import { defineKernel, type InputMetas } from '../kernel.js';
import { formatShape } from '../shape.js';
import { ArgCheck } from './check.js';
import { bytesOf, F32, F32_BYTES, FLOAT, type NoAttrs } from './vocabulary.js';

const FAMILY = 'loss';
const I32 = ['i32'] as const;

/** The inputs of the loss, and the first two of its backward. */
const LOGITS_TARGETS = [
  { name: 'logits', dtypes: FLOAT, doc: '[N, C]' },
  { name: 'targets', dtypes: I32, doc: '[N], class ids in [0, C)' },
] as const;

/** Checks logits [N, C] (N, C >= 1) and targets [N]; returns [N, C]. */
function checkLogitsTargets(kernel: string, [logits, targets]: InputMetas): [number, number] {
  const check = new ArgCheck(kernel);
  check.rank('logits', logits!, 2, '[N, C]');
  const [n, c] = logits!.shape as [number, number];
  // The mean over no rows and the softmax over no classes have no value.
  check.shape(
    n >= 1 && c >= 1,
    'logits',
    'logits must have a row and a class',
    '[N >= 1, C >= 1]',
    logits!.shape,
  );
  check.rank('targets', targets!, 1, '[N]');
  check.dim('targets', targets!, 0, n, "the rows of 'logits'");
  return [n, c];
}

/** log Σ exp(x[off .. off + c)), shifted by the row maximum so large logits do not overflow. */
function logSumExp(x: HostArray, off: number, c: number): number {
  let max = Number.NEGATIVE_INFINITY;
  for (let j = 0; j < c; j++) max = Math.max(max, x[off + j]!);
  let sum = 0;
  for (let j = 0; j < c; j++) sum += Math.exp(x[off + j]! - max);
  return max + Math.log(sum);
}

const inRange = (t: number, c: number): boolean => Number.isInteger(t) && t >= 0 && t < c;

export const crossEntropy = defineKernel<NoAttrs>({
  name: 'crossEntropy',
  family: FAMILY,
  summary:
    'loss = mean over rows of −log softmax(logits)[row, target]; a target outside [0, C) makes the loss NaN (targets live on the device and are not checked on the host)',
  inputs: LOGITS_TARGETS,
  attributes: {},
  infer(inputs) {
    checkLogitsTargets('crossEntropy', inputs);
    // The mean loss stays f32 whatever the logits: one value, summed over N rows.
    return [{ name: 'loss', shape: [], dtype: 'f32' }];
  },
  reference([logits, targets], _attrs, io) {
    const [n, c] = io.inputs[0]!.shape as [number, number];
    let total = 0;
    for (let r = 0; r < n; r++) {
      const t = targets![r]!;
      // A bad target poisons the loss so that it shows instead of reading another row's memory.
      total += inRange(t, c) ? logSumExp(logits!, r * c, c) - logits![r * c + t]! : Number.NaN;
    }
    return [Float32Array.of(total / n)];
  },
  cost([logits, targets]) {
    const [n, c] = logits!.shape as [number, number];
    // Max, subtract, exp and add per element.
    return { flops: 4 * n * c, bytes: bytesOf(logits) + bytesOf(targets) + F32_BYTES };
  },
});

export const crossEntropyBackward = defineKernel<NoAttrs>({
  name: 'crossEntropyBackward',
  family: FAMILY,
  summary:
    'dlogits = dloss · (softmax(logits) − onehot(targets)) / N; a row whose target is outside [0, C) is NaN',
  inputs: [
    ...LOGITS_TARGETS,
    { name: 'dloss', dtypes: F32, doc: '[] or [1], the gradient of the mean loss' },
  ],
  attributes: {},
  infer(inputs) {
    const [n, c] = checkLogitsTargets('crossEntropyBackward', inputs);
    const dloss = inputs[2]!;
    new ArgCheck('crossEntropyBackward').shape(
      dloss.shape.length === 0 || (dloss.shape.length === 1 && dloss.shape[0] === 1),
      'dloss',
      'dloss must hold one value',
      '[] or [1]',
      formatShape(dloss.shape),
    );
    return [{ name: 'dlogits', shape: [n, c], dtype: inputs[0]!.dtype }];
  },
  reference([logits, targets, dloss], _attrs, io) {
    const [n, c] = io.inputs[0]!.shape as [number, number];
    const dy = new Float32Array(n * c);
    const s = dloss![0]! / n;
    for (let r = 0; r < n; r++) {
      const t = targets![r]!;
      const off = r * c;
      if (!inRange(t, c)) {
        dy.fill(Number.NaN, off, off + c);
        continue;
      }
      const lse = logSumExp(logits!, off, c);
      for (let j = 0; j < c; j++) dy[off + j] = s * (Math.exp(logits![off + j]! - lse) - (j === t ? 1 : 0));
    }
    return [dy];
  },
  cost([logits, targets]) {
    const [n, c] = logits!.shape as [number, number];
    // The forward's softmax, then subtract and scale.
    return { flops: 6 * n * c, bytes: 2 * bytesOf(logits) + bytesOf(targets) + F32_BYTES };
  },
});
