import { adamwMomentConstants, adamwStep, FLOAT, sgdStep } from '@rayo/core';
import { type AnyWgpuKernel, wgpuKernel } from '../kernel.js';
import { clipKernel, globalNormKernel } from './clipByGlobalNorm.js';
import { dispatchUpdate, EXPM1, type UpdateDecl, updateLayout } from './inPlaceUpdate.js';
import { lossScaleKernel } from './lossScaling.js';
import { multiAdamwKernel } from './multiTensorAdamw.js';

// ---- adamwStep ---------------------------------------------------------------

const ADAMW: UpdateDecl = {
  name: 'adamwStep',
  kernel: 'adamwStep',
  operands: [
    ['param', 'read_write'],
    ['grad', 'read'],
    ['m', 'read_write'],
    ['v', 'read_write'],
  ],
  layout: updateLayout([
    ['decay', 'f32'],
    ['stepSize', 'f32'],
    ['rootCorrection', 'f32'],
    ['eps', 'f32'],
    ['beta1', 'f32'],
    ['oneMinusBeta1', 'f32'],
    ['beta2', 'f32'],
    ['oneMinusBeta2', 'f32'],
  ] as const),
  // PyTorch: p ← p·(1 − lr·wd) − (lr / bc1) · m / (√v / √bc2 + eps).
  body: `m_out = params.beta1 * m + params.oneMinusBeta1 * grad;
  v_out = params.beta2 * v + params.oneMinusBeta2 * grad * grad;
  let denom = sqrt(v_out) * params.rootCorrection + params.eps;
  param_out = param * params.decay - params.stepSize * m_out / denom;`,
};

const ADAMW_DEVICE_LAYOUT = updateLayout([
  ['step', 'f32'],
  ['lr', 'f32'],
  ['logBeta1', 'f32'],
  ['logBeta2', 'f32'],
  ['weightDecay', 'f32'],
  ['eps', 'f32'],
  ['beta1', 'f32'],
  ['oneMinusBeta1', 'f32'],
  ['beta2', 'f32'],
  ['oneMinusBeta2', 'f32'],
] as const);

/**
 * AdamW with the step t and/or the learning rate read from device tensors.
 * The per-launch constants are formed once per thread before the loop, in
 * f32: 1 − β^t = −expm1(t·ln β) with ln β from the host in f64 and expm1 by
 * its series where 1 − e^x would cancel, so that a small t·(1 − β) keeps its
 * digits.
 */
function adamwDeviceDecl(deviceStep: boolean, deviceLr: boolean): UpdateDecl {
  const extra: [string, 'f32' | 'i32'][] = [];
  if (deviceStep) extra.push(['stepAt', 'i32']);
  if (deviceLr) extra.push(['lrAt', 'f32']);
  return {
    name: `adamwStep/device${deviceStep ? '-step' : ''}${deviceLr ? '-lr' : ''}`,
    kernel: 'adamwStep',
    operands: ADAMW.operands,
    extra,
    helpers: EXPM1,
    layout: ADAMW_DEVICE_LAYOUT,
    prologue: `let t = ${deviceStep ? 'f32(stepAt[0])' : 'params.step'};
  let lr = ${deviceLr ? 'lrAt[0]' : 'params.lr'};
  let bc1 = -expm1(t * params.logBeta1);
  let bc2 = -expm1(t * params.logBeta2);
  let decay = 1.0 - lr * params.weightDecay;
  let stepSize = lr / bc1;
  let rootCorrection = 1.0 / sqrt(bc2);`,
    body: `m_out = params.beta1 * m + params.oneMinusBeta1 * grad;
  v_out = params.beta2 * v + params.oneMinusBeta2 * grad * grad;
  let denom = sqrt(v_out) * rootCorrection + params.eps;
  param_out = param * decay - stepSize * m_out / denom;`,
  };
}

/** Indexed by 2·(step on the device) + (lr on the device). */
const ADAMW_DEVICE = [false, true].flatMap((deviceStep) =>
  [false, true].map((deviceLr) => adamwDeviceDecl(deviceStep, deviceLr)),
);

const adamwKernel = wgpuKernel(
  adamwStep,
  (encoder, { inputs, attrs }) => {
    const { lr, beta1, beta2, eps, weightDecay, step } = attrs;
    const operands = [inputs[0]!, inputs[1]!, inputs[2]!, inputs[3]!];
    const stepAt = inputs[4];
    const lrAt = inputs[5];
    if (stepAt || lrAt) {
      const decl = ADAMW_DEVICE[(stepAt ? 2 : 0) + (lrAt ? 1 : 0)]!;
      dispatchUpdate(encoder, decl, operands, [...(stepAt ? [stepAt] : []), ...(lrAt ? [lrAt] : [])], {
        ...adamwMomentConstants(attrs),
        step,
        lr,
        weightDecay,
      });
      return;
    }
    // The corrections are formed in f64 here: 1 − β^t loses everything in f32 for small t·(1 − β).
    const bc1 = -Math.expm1(step * Math.log(beta1));
    const bc2 = -Math.expm1(step * Math.log(beta2));
    dispatchUpdate(encoder, ADAMW, operands, [], {
      decay: 1 - lr * weightDecay,
      stepSize: lr / bc1,
      rootCorrection: 1 / Math.sqrt(bc2),
      eps,
      beta1,
      oneMinusBeta1: 1 - beta1,
      beta2,
      oneMinusBeta2: 1 - beta2,
    });
  },
  { dtypes: FLOAT },
);

// ---- sgdStep -------------------------------------------------------------------

const SGD_LAYOUT = updateLayout([
  ['lr', 'f32'],
  ['momentum', 'f32'],
  ['oneMinusDampening', 'f32'],
  ['weightDecay', 'f32'],
] as const);

function sgdDecl(variant: 'plain' | 'momentum' | 'nesterov'): UpdateDecl {
  const grad = 'let g = grad + params.weightDecay * param;';
  if (variant === 'plain') {
    // Without momentum PyTorch keeps no buffer: it is neither read nor written.
    return {
      name: 'sgdStep/plain',
      kernel: 'sgdStep',
      operands: [
        ['param', 'read_write'],
        ['grad', 'read'],
      ],
      layout: SGD_LAYOUT,
      body: `${grad}\n  param_out = param - params.lr * g;`,
    };
  }
  return {
    name: `sgdStep/${variant}`,
    kernel: 'sgdStep',
    operands: [
      ['param', 'read_write'],
      ['grad', 'read'],
      ['buf', 'read_write'],
    ],
    layout: SGD_LAYOUT,
    body: `${grad}
  buf_out = params.momentum * buf + params.oneMinusDampening * g;
  param_out = param - params.lr * ${variant === 'nesterov' ? '(g + params.momentum * buf_out)' : 'buf_out'};`,
  };
}

const SGD_PLAIN = sgdDecl('plain');
const SGD_MOMENTUM = sgdDecl('momentum');
const SGD_NESTEROV = sgdDecl('nesterov');

const sgdKernel = wgpuKernel(
  sgdStep,
  (encoder, { inputs, attrs }) => {
    const { lr, momentum, dampening, weightDecay, nesterov } = attrs;
    const values = { lr, momentum, oneMinusDampening: 1 - dampening, weightDecay };
    if (momentum === 0) {
      dispatchUpdate(encoder, SGD_PLAIN, [inputs[0]!, inputs[1]!], [], values);
      return;
    }
    dispatchUpdate(
      encoder,
      nesterov ? SGD_NESTEROV : SGD_MOMENTUM,
      [inputs[0]!, inputs[1]!, inputs[2]!],
      [],
      values,
    );
  },
  { dtypes: FLOAT },
);

/** The optimizer family: adamwStep and sgdStep here, the norm passes, the multi-tensor AdamW and the loss scale's update in their own files. */
export const OPTIMIZER_KERNELS: readonly AnyWgpuKernel[] = [
  adamwKernel,
  sgdKernel,
  clipKernel,
  globalNormKernel,
  multiAdamwKernel,
  lossScaleKernel,
];
