import { defineKernel, deviceAttribute } from '../kernel.js';
import { sizeOf } from '../shape.js';
import { ArgCheck } from './check.js';

const FAMILY = 'optimizer';
const F32 = ['f32'] as const;
const BYTES = 4;

// ---- AdamW -----------------------------------------------------------------

type AdamwAttrs = {
  lr: number;
  beta1: number;
  beta2: number;
  eps: number;
  weightDecay: number;
  step: number;
};

export const adamwStep = defineKernel<AdamwAttrs>({
  name: 'adamwStep',
  family: FAMILY,
  summary: 'One AdamW step in place (PyTorch semantics: decoupled weight decay, bias-corrected moments)',
  inputs: [
    { name: 'param', dtypes: F32, doc: 'updated in place' },
    { name: 'grad', dtypes: F32, doc: "the shape of 'param'" },
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
    lr: { kind: 'number', min: 0, doc: 'learning rate' },
    beta1: { kind: 'number', default: 0.9, min: 0, doc: 'first moment decay, in [0, 1)' },
    beta2: { kind: 'number', default: 0.999, min: 0, doc: 'second moment decay, in [0, 1)' },
    eps: { kind: 'number', default: 1e-8, above: 0, doc: 'added to the bias-corrected root of v' },
    weightDecay: { kind: 'number', default: 0.01, min: 0, doc: 'decoupled: param ← param · (1 − lr · wd)' },
    step: { kind: 'number', integer: true, min: 1, doc: 'the step number t, from 1, for bias correction' },
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
    // t must stay exact in f32 on a device, hence 2^24.
    const step = deviceAttribute(adamwStep, 'step', stepAt, attrs.step, 1, 2 ** 24);
    const lr = deviceAttribute(adamwStep, 'lr', lrAt, attrs.lr, 0, Number.MAX_VALUE);
    const n = param!.length;
    const p1 = new Float32Array(n);
    const m1 = new Float32Array(n);
    const v1 = new Float32Array(n);
    const decay = 1 - lr * weightDecay;
    const bc1 = 1 - beta1 ** step;
    const bc2 = 1 - beta2 ** step;
    for (let i = 0; i < n; i++) {
      const g = grad![i]!;
      const mi = beta1 * m![i]! + (1 - beta1) * g;
      const vi = beta2 * v![i]! + (1 - beta2) * g * g;
      p1[i] = param![i]! * decay - (lr * (mi / bc1)) / (Math.sqrt(vi / bc2) + eps);
      m1[i] = mi;
      v1[i] = vi;
    }
    return [p1, m1, v1];
  },
  // Reads param, grad, m, v; writes param, m, v.
  cost: ([param]) => ({ flops: 15 * sizeOf(param!.shape), bytes: 7 * BYTES * sizeOf(param!.shape) }),
});

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
    { name: 'grad', dtypes: F32, doc: "the shape of 'param'" },
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
  cost([param], { momentum }) {
    const n = sizeOf(param!.shape);
    // Plain SGD reads param and grad and writes param; momentum adds the buffer's read and write.
    return momentum > 0 ? { flops: 10 * n, bytes: 5 * BYTES * n } : { flops: 4 * n, bytes: 3 * BYTES * n };
  },
});

// ---- gradient clipping ---------------------------------------------------------

type ClipNormAttrs = { maxNorm: number; eps: number };

export const clipByGlobalNorm = defineKernel<ClipNormAttrs>({
  name: 'clipByGlobalNorm',
  family: FAMILY,
  summary:
    'Scales every gradient in place by min(1, maxNorm / (norm + eps)), norm = the L2 norm of all of them (PyTorch clip_grad_norm_); also returns that norm',
  inputs: [{ name: 'grads', dtypes: F32, variadic: true, doc: 'one or more tensors of any shapes' }],
  attributes: {
    maxNorm: { kind: 'number', above: 0, doc: 'the largest global norm left unscaled' },
    eps: { kind: 'number', default: 1e-6, min: 0, doc: 'added to the norm before dividing' },
  },
  infer(grads) {
    return [
      ...grads.map((g, i) => ({ name: `grads[${i}]`, shape: g!.shape, dtype: 'f32' as const, aliasOf: i })),
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
    return { flops: 3 * n, bytes: BYTES * (2 * n + 1) };
  },
});
