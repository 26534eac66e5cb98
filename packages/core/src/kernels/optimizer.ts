import type { HostArray } from '../dtype.js';
import { defineKernel, deviceAttribute, inputName, type TensorMeta } from '../kernel.js';
import { sizeOf } from '../shape.js';
import { ArgCheck } from './check.js';
import { bytesOf, F32, F32_BYTES, FLOAT, GRADIENTS } from './vocabulary.js';

const FAMILY = 'optimizer';

// ---- AdamW -----------------------------------------------------------------

/** The attributes AdamW kernels share (weight decay differs: one value, or one per tensor). */
const ADAMW_ATTRIBUTES = {
  lr: { kind: 'number', min: 0, doc: 'learning rate' },
  beta1: { kind: 'number', default: 0.9, min: 0, doc: 'first moment decay, in [0, 1)' },
  beta2: { kind: 'number', default: 0.999, min: 0, doc: 'second moment decay, in [0, 1)' },
  eps: { kind: 'number', default: 1e-8, above: 0, doc: 'added to the bias-corrected root of v' },
  step: { kind: 'number', integer: true, min: 1, doc: 'the step number t, from 1, for bias correction' },
} as const;

/** adamwStep's attributes, and any AdamW step's values once resolved (`step` and `lr` from the attributes or the device). */
export type AdamwValues = {
  lr: number;
  beta1: number;
  beta2: number;
  eps: number;
  weightDecay: number;
  step: number;
};

/** One AdamW update of one tensor; the gradient is first multiplied by `gradScale` (and rounded to f32, as a clip pass stores it). */
function adamwUpdate(
  param: HostArray,
  grad: HostArray,
  m: HostArray,
  v: HostArray,
  { lr, beta1, beta2, eps, weightDecay, step }: AdamwValues,
  gradScale: number,
): Float32Array[] {
  const n = param.length;
  const p1 = new Float32Array(n);
  const m1 = new Float32Array(n);
  const v1 = new Float32Array(n);
  const decay = 1 - lr * weightDecay;
  const bc1 = 1 - beta1 ** step;
  const bc2 = 1 - beta2 ** step;
  for (let i = 0; i < n; i++) {
    const g = gradScale === 1 ? grad[i]! : Math.fround(grad[i]! * gradScale);
    const mi = beta1 * m[i]! + (1 - beta1) * g;
    const vi = beta2 * v[i]! + (1 - beta2) * g * g;
    p1[i] = param[i]! * decay - (lr * (mi / bc1)) / (Math.sqrt(vi / bc2) + eps);
    m1[i] = mi;
    v1[i] = vi;
  }
  return [p1, m1, v1];
}

/** The step number t must stay exact in f32 on a device, hence 2^24. */
const MAX_STEP = 2 ** 24;

export const adamwStep = defineKernel<AdamwValues>({
  name: 'adamwStep',
  family: FAMILY,
  summary: 'One AdamW step in place (PyTorch semantics: decoupled weight decay, bias-corrected moments)',
  inputs: [
    { name: 'param', dtypes: F32, doc: 'updated in place' },
    { name: 'grad', dtypes: FLOAT, dtypeGroup: GRADIENTS, doc: "the shape of 'param'; may be half" },
    { name: 'm', dtypes: F32, doc: 'first moment, updated in place' },
    { name: 'v', dtypes: F32, doc: 'second moment, updated in place' },
    {
      name: 'step',
      dtypes: ['i32'],
      optional: true,
      attribute: 'step',
      doc: '[1]: the step number t, read on the device (instead of the attribute) so that a recorded training step replays at the next t',
    },
    {
      name: 'lr',
      dtypes: F32,
      optional: true,
      attribute: 'lr',
      doc: '[1]: the learning rate, read on the device (instead of the attribute) so that a schedule needs no re-recording',
    },
  ],
  attributes: {
    ...ADAMW_ATTRIBUTES,
    weightDecay: { kind: 'number', default: 0.01, min: 0, doc: 'decoupled: param ← param · (1 − lr · wd)' },
  },
  infer([param, grad, m, v], { beta1, beta2 }) {
    const check = new ArgCheck('adamwStep');
    check.sameShape('grad', grad!, param!.shape, "'param'");
    check.sameShape('m', m!, param!.shape, "'param'");
    check.sameShape('v', v!, param!.shape, "'param'");
    // A decay of 1 would never forget and makes the bias correction divide by zero.
    check.attr(beta1 < 1, 'beta1', 'beta1 must be below 1', '< 1', beta1);
    check.attr(beta2 < 1, 'beta2', 'beta2 must be below 1', '< 1', beta2);
    return [
      { name: 'param', shape: param!.shape, dtype: 'f32', aliasOf: 0 },
      { name: 'm', shape: param!.shape, dtype: 'f32', aliasOf: 2 },
      { name: 'v', shape: param!.shape, dtype: 'f32', aliasOf: 3 },
    ];
  },
  reference([param, grad, m, v, stepAt, lrAt], attrs) {
    const { beta1, beta2, eps, weightDecay } = attrs;
    const step = deviceAttribute(adamwStep, 'step', stepAt, attrs.step, 1, MAX_STEP);
    const lr = deviceAttribute(adamwStep, 'lr', lrAt, attrs.lr, 0, Number.MAX_VALUE);
    return adamwUpdate(param!, grad!, m!, v!, { lr, beta1, beta2, eps, weightDecay, step }, 1);
  },
  // Reads param, grad, m, v; writes param, m, v.
  cost: ([param, grad]) => ({ flops: 15 * sizeOf(param!.shape), bytes: 6 * bytesOf(param) + bytesOf(grad) }),
});

/** The names of `adamwMomentConstants`, in the order kernels that take them as parameters list them. */
export const ADAMW_MOMENT_CONSTANTS = [
  'beta1',
  'oneMinusBeta1',
  'beta2',
  'oneMinusBeta2',
  'logBeta1',
  'logBeta2',
  'eps',
] as const;

/**
 * What every AdamW kernel derives from its attributes on the host: the
 * decays and their complements, and ln β for bias corrections formed on the
 * device as −expm1(t · ln β). ln 0 is −∞; a large finite value makes
 * e^(t·ln β) 0, as β^t is.
 */
export function adamwMomentConstants(attrs: {
  readonly beta1: number;
  readonly beta2: number;
  readonly eps: number;
}): Record<(typeof ADAMW_MOMENT_CONSTANTS)[number], number> {
  const { beta1, beta2, eps } = attrs;
  return {
    beta1,
    oneMinusBeta1: 1 - beta1,
    beta2,
    oneMinusBeta2: 1 - beta2,
    logBeta1: beta1 === 0 ? -1e30 : Math.log(beta1),
    logBeta2: beta2 === 0 ? -1e30 : Math.log(beta2),
    eps,
  };
}

// ---- SGD with momentum -------------------------------------------------------

type SgdAttrs = {
  lr: number;
  momentum: number;
  dampening: number;
  weightDecay: number;
  nesterov: boolean;
};

export const sgdStep = defineKernel<SgdAttrs>({
  name: 'sgdStep',
  family: FAMILY,
  summary:
    'One SGD step in place (PyTorch semantics; the momentum buffer starts at zeros and is left as is when momentum = 0)',
  inputs: [
    { name: 'param', dtypes: F32, doc: 'updated in place' },
    { name: 'grad', dtypes: FLOAT, dtypeGroup: GRADIENTS, doc: "the shape of 'param'; may be half" },
    {
      name: 'momentumBuffer',
      dtypes: F32,
      doc: 'updated in place; start it at zeros (PyTorch starts it at the first gradient, which differs only when dampening > 0)',
    },
  ],
  attributes: {
    lr: { kind: 'number', min: 0, doc: 'learning rate' },
    momentum: { kind: 'number', default: 0, min: 0, doc: 'in [0, 1); 0 is plain SGD' },
    dampening: {
      kind: 'number',
      default: 0,
      min: 0,
      max: 1,
      doc: 'the gradient enters the buffer times (1 − dampening)',
    },
    weightDecay: {
      kind: 'number',
      default: 0,
      min: 0,
      doc: 'L2 penalty added to the gradient: g + wd · param',
    },
    nesterov: {
      kind: 'boolean',
      default: false,
      doc: 'Nesterov momentum; needs momentum > 0 and dampening = 0',
    },
  },
  infer([param, grad, buf], { momentum, dampening, nesterov }) {
    const check = new ArgCheck('sgdStep');
    check.sameShape('grad', grad!, param!.shape, "'param'");
    check.sameShape('momentumBuffer', buf!, param!.shape, "'param'");
    check.attr(momentum < 1, 'momentum', 'momentum must be below 1', '< 1', momentum);
    check.attr(
      !nesterov || (momentum > 0 && dampening === 0),
      'nesterov',
      'Nesterov momentum needs momentum and no dampening',
      'momentum > 0 and dampening = 0',
      `momentum ${momentum}, dampening ${dampening}`,
    );
    return [
      { name: 'param', shape: param!.shape, dtype: 'f32', aliasOf: 0 },
      { name: 'momentumBuffer', shape: param!.shape, dtype: 'f32', aliasOf: 2 },
    ];
  },
  reference([param, grad, buf], { lr, momentum, dampening, weightDecay, nesterov }) {
    const n = param!.length;
    const p1 = new Float32Array(n);
    // Without momentum PyTorch keeps no buffer (and ignores dampening): it is returned unchanged.
    const b1 = Float32Array.from(buf!);
    for (let i = 0; i < n; i++) {
      const p = param![i]!;
      const g = grad![i]! + weightDecay * p;
      let d = g;
      if (momentum > 0) {
        const b = momentum * buf![i]! + (1 - dampening) * g;
        b1[i] = b;
        d = nesterov ? g + momentum * b : b;
      }
      p1[i] = p - lr * d;
    }
    return [p1, b1];
  },
  cost([param, grad], { momentum }) {
    const n = sizeOf(param!.shape);
    // Plain SGD reads param and grad and writes param; momentum adds the buffer's read and write.
    return momentum > 0
      ? { flops: 10 * n, bytes: 4 * bytesOf(param) + bytesOf(grad) }
      : { flops: 4 * n, bytes: 2 * bytesOf(param) + bytesOf(grad) };
  },
});

// ---- gradient clipping ---------------------------------------------------------

type ClipNormAttrs = { maxNorm: number; eps: number };

export const clipByGlobalNorm = defineKernel<ClipNormAttrs>({
  name: 'clipByGlobalNorm',
  family: FAMILY,
  summary:
    'Scales every gradient in place by min(1, maxNorm / (norm + eps)), norm = the L2 norm of all of them (PyTorch clip_grad_norm_); also returns that norm',
  inputs: [
    { name: 'grads', dtypes: FLOAT, variadic: true, doc: 'one or more tensors of any shapes, of one dtype' },
  ],
  attributes: {
    maxNorm: { kind: 'number', above: 0, doc: 'the largest global norm left unscaled' },
    eps: { kind: 'number', default: 1e-6, min: 0, doc: 'added to the norm before dividing' },
  },
  infer(grads) {
    return [
      ...grads.map((g, i) => ({ name: `grads[${i}]`, shape: g!.shape, dtype: g!.dtype, aliasOf: i })),
      { name: 'norm', shape: [], dtype: 'f32' },
    ];
  },
  reference(grads, { maxNorm, eps }) {
    let sumSq = 0;
    for (const g of grads) for (let i = 0; i < g!.length; i++) sumSq += g![i]! * g![i]!;
    const norm = Math.sqrt(sumSq);
    const scale = Math.min(1, maxNorm / (norm + eps));
    const scaled = grads.map((g) => {
      const y = new Float32Array(g!.length);
      for (let i = 0; i < y.length; i++) y[i] = g![i]! * scale;
      return y;
    });
    return [...scaled, Float32Array.of(norm)];
  },
  cost(grads) {
    const n = grads.reduce((sum, g) => sum + sizeOf(g!.shape), 0);
    // A square-add per element for the norm, a multiply to scale; read and write each element once.
    const bytes = grads.reduce((sum, g) => sum + 2 * bytesOf(g), F32_BYTES);
    return { flops: 3 * n, bytes };
  },
});

// ---- global norm -------------------------------------------------------------------

export const globalNorm = defineKernel<Record<string, never>>({
  name: 'globalNorm',
  family: FAMILY,
  summary:
    'The L2 norm of all the given tensors together (what clipByGlobalNorm measures), without writing them: one read of each',
  inputs: [
    { name: 'xs', dtypes: FLOAT, variadic: true, doc: 'one or more tensors of any shapes, of one dtype' },
  ],
  attributes: {},
  infer() {
    return [{ name: 'norm', shape: [], dtype: 'f32' }];
  },
  reference(xs) {
    let sumSq = 0;
    for (const x of xs) for (let i = 0; i < x!.length; i++) sumSq += x![i]! * x![i]!;
    return [Float32Array.of(Math.sqrt(sumSq))];
  },
  cost(xs) {
    const n = xs.reduce((sum, x) => sum + sizeOf(x!.shape), 0);
    return { flops: 2 * n, bytes: xs.reduce((sum, x) => sum + bytesOf(x), F32_BYTES) };
  },
});

// ---- AdamW over many tensors in one launch -----------------------------------------

/** The largest f32: a clip limit that never clips, the default of `maxNorm`. */
const NEVER_CLIPS = 3.4028234663852886e38;
const CLIP_EPS = 1e-6;

/**
 * What multiTensorAdamw multiplies every gradient by: the clip factor
 * min(1, maxNorm / (norm + clipEps)) of the unscaled norm gradNorm / S, then
 * 1 / S; 1 without a norm. Each quotient rounded to f32, as a device forms it.
 */
function gradientFactor(
  gradNorm: number | undefined,
  lossScale: number | undefined,
  maxNorm: number,
  clipEps: number,
): number {
  if (gradNorm === undefined) return 1;
  const s = lossScale ?? 1;
  const norm = Math.fround(gradNorm / s);
  // min(1, NaN) is NaN in both Math.min and PyTorch's clamp: unscaled, a NaN norm poisons every update.
  const clip = Math.min(1, Math.fround(maxNorm / (norm + clipEps)));
  return lossScale === undefined ? clip : Math.fround(clip / s);
}

type MultiAdamwAttrs = Omit<AdamwValues, 'weightDecay'> & {
  weightDecay: readonly number[];
  maxNorm: number;
  clipEps: number;
};

/** Inputs before the variadic tensors: step, lr, gradNorm, lossScale. */
export const MULTI_ADAMW_FIXED = 4;
const MULTI_ROLES = ['param', 'grad', 'm', 'v'] as const;

export const multiTensorAdamw = defineKernel<MultiAdamwAttrs>({
  name: 'multiTensorAdamw',
  family: FAMILY,
  summary:
    'adamwStep over many tensors at once, each gradient optionally scaled by min(1, maxNorm / (gradNorm + clipEps)) first (PyTorch clip_grad_norm_ then AdamW, without writing the gradients); with a loss scale S, the gradients are unscaled by 1/S in the same factor and a non-finite gradNorm leaves everything unchanged (GradScaler.step)',
  inputs: [
    {
      name: 'step',
      dtypes: ['i32'],
      optional: true,
      attribute: 'step',
      doc: '[1]: the step number t, read on the device so that a recorded step replays at the next t',
    },
    {
      name: 'lr',
      dtypes: F32,
      optional: true,
      attribute: 'lr',
      doc: '[1]: the learning rate, read on the device so that a schedule needs no re-recording',
    },
    {
      name: 'gradNorm',
      dtypes: F32,
      optional: true,
      doc: 'one element ([] or [1]): the global L2 norm of the gradients (globalNorm); given, the gradients are clipped to maxNorm',
    },
    {
      name: 'lossScale',
      dtypes: F32,
      optional: true,
      doc: "one element: the loss scale S the gradients carry (needs 'gradNorm', their norm as they are): each gradient is read times clip(gradNorm / S) / S, and a gradNorm that is not finite (inf or NaN in some gradient) skips the update, leaving param, m and v unchanged",
    },
    {
      name: 'tensors',
      dtypes: FLOAT,
      variadic: true,
      roles: [{ dtypes: F32 }, { dtypes: FLOAT, dtypeGroup: GRADIENTS }, { dtypes: F32 }, { dtypes: F32 }],
      doc: 'param, grad, m, v of each tensor in turn (each four of one shape); param, m and v f32 and updated in place, the grads of one dtype (half too)',
    },
  ],
  attributes: {
    ...ADAMW_ATTRIBUTES,
    weightDecay: {
      kind: 'numbers',
      default: [0.01],
      min: 0,
      doc: 'decoupled decay: one value for every tensor, or one per tensor (0 leaves a tensor undecayed)',
    },
    maxNorm: {
      kind: 'number',
      default: NEVER_CLIPS,
      above: 0,
      doc: "the largest global gradient norm left unscaled; needs input 'gradNorm'",
    },
    clipEps: {
      kind: 'number',
      default: CLIP_EPS,
      min: 0,
      doc: "added to 'gradNorm' before dividing (PyTorch: 1e-6)",
    },
  },
  infer(inputs, { beta1, beta2, weightDecay, maxNorm, clipEps }) {
    const check = new ArgCheck('multiTensorAdamw');
    const [, , gradNorm, lossScale] = inputs;
    const tensors = inputs.slice(MULTI_ADAMW_FIXED) as TensorMeta[];
    const count = tensors.length / MULTI_ROLES.length;
    check.shape(
      Number.isInteger(count),
      'tensors',
      'tensors come in fours: param, grad, m, v',
      'a multiple of 4 tensors',
      `${tensors.length} tensors`,
    );
    const name = (i: number) => inputName(multiTensorAdamw, MULTI_ADAMW_FIXED + i);
    for (let j = 0; j < count; j++) {
      const param = tensors[4 * j]!;
      for (let r = 1; r < MULTI_ROLES.length; r++) {
        const what = `'${name(4 * j)}', the param of tensor ${j}`;
        check.sameShape(name(4 * j + r), tensors[4 * j + r]!, param.shape, what);
      }
    }
    if (gradNorm) {
      const size = sizeOf(gradNorm.shape);
      check.shape(size === 1, 'gradNorm', 'the norm is one element', '[] or [1]', gradNorm.shape);
    } else {
      // Clip settings without a norm would be ignored.
      check.attr(
        maxNorm === NEVER_CLIPS,
        'maxNorm',
        "clipping needs input 'gradNorm'",
        'no maxNorm',
        maxNorm,
      );
      check.attr(clipEps === CLIP_EPS, 'clipEps', "clipping needs input 'gradNorm'", 'no clipEps', clipEps);
      // The skip of a non-finite step is decided on the norm.
      check.shape(
        !lossScale,
        'lossScale',
        "a loss scale needs input 'gradNorm'",
        "input 'gradNorm' with it",
        'no gradNorm',
      );
    }
    if (lossScale) {
      const size = sizeOf(lossScale.shape);
      check.shape(size === 1, 'lossScale', 'the loss scale is one element', '[] or [1]', lossScale.shape);
    }
    check.attr(
      weightDecay.length === 1 || weightDecay.length === count,
      'weightDecay',
      'one weight decay for all tensors or one per tensor',
      `1 or ${count} values`,
      `${weightDecay.length} values`,
    );
    check.attr(beta1 < 1, 'beta1', 'beta1 must be below 1', '< 1', beta1);
    check.attr(beta2 < 1, 'beta2', 'beta2 must be below 1', '< 1', beta2);
    return tensors.flatMap((param, j) =>
      j % 4 !== 0
        ? []
        : (['param', 'm', 'v'] as const).map((role) => {
            const at = j + MULTI_ROLES.indexOf(role);
            return {
              name: `${role}[${j / 4}]`,
              shape: param.shape,
              dtype: 'f32' as const,
              aliasOf: MULTI_ADAMW_FIXED + at,
            };
          }),
    );
  },
  reference(inputs, attrs) {
    const [stepAt, lrAt, gradNorm, lossScale] = inputs;
    const step = deviceAttribute(multiTensorAdamw, 'step', stepAt, attrs.step, 1, MAX_STEP);
    const lr = deviceAttribute(multiTensorAdamw, 'lr', lrAt, attrs.lr, 0, Number.MAX_VALUE);
    const { beta1, beta2, eps, weightDecay, maxNorm, clipEps } = attrs;
    const tensors = inputs.slice(MULTI_ADAMW_FIXED);
    if (lossScale && !Number.isFinite(Number(gradNorm![0]))) {
      // A step with an overflowed gradient is skipped, as GradScaler.step skips optimizer.step.
      return tensors.flatMap((t, i) => (i % 4 === 1 ? [] : [Float32Array.from(t!)]));
    }
    const scale = gradientFactor(gradNorm?.[0], lossScale?.[0], maxNorm, clipEps);
    const out: HostArray[] = [];
    for (let j = 0; j < tensors.length / 4; j++) {
      const [param, grad, m, v] = tensors.slice(4 * j, 4 * j + 4) as HostArray[];
      const wd = weightDecay.length === 1 ? weightDecay[0]! : weightDecay[j]!;
      out.push(
        ...adamwUpdate(param!, grad!, m!, v!, { lr, beta1, beta2, eps, weightDecay: wd, step }, scale),
      );
    }
    return out;
  },
  cost(inputs) {
    const n = inputs
      .slice(MULTI_ADAMW_FIXED)
      .reduce((sum, t, i) => sum + (i % 4 === 0 ? sizeOf(t!.shape) : 0), 0);
    const gradBytes = inputs
      .slice(MULTI_ADAMW_FIXED)
      .reduce((sum, t, i) => sum + (i % 4 === 1 ? bytesOf(t) : 0), 0);
    // adamwStep's traffic per element, plus a multiply by the clip (and unscale) factor.
    return { flops: (inputs[2] ? 16 : 15) * n, bytes: 6 * F32_BYTES * n + gradBytes };
  },
});
