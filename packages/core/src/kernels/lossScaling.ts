import { defineKernel } from '../kernel.js';
import { sizeOf } from '../shape.js';
import { ArgCheck } from './check.js';
import { F32, F32_BYTES } from './vocabulary.js';

// Dynamic loss scaling for half-precision training (PyTorch's GradScaler):
// the loss is scaled by S before backward so that small gradients do not
// underflow in half, the optimizer unscales them (multiTensorAdamw's
// lossScale) and skips a step whose gradients overflowed, and this kernel
// moves S after the step, on the device, so that a recorded step replays
// without reading anything back.

type LossScaleAttrs = { growthFactor: number; backoffFactor: number; growthInterval: number };

/** The most finite steps counted in a row: the counter is an i32 (and exact in f32). */
const MAX_GROWTH_INTERVAL = 2 ** 24;

export const updateLossScale = defineKernel<LossScaleAttrs>({
  name: 'updateLossScale',
  family: 'optimizer',
  summary:
    'GradScaler.update in place: a non-finite gradNorm multiplies the scale by backoffFactor and resets the count of finite steps; otherwise the count grows, and at growthInterval the scale is multiplied by growthFactor (where that stays finite) and the count restarts; the step number advances on a finite step only',
  inputs: [
    {
      name: 'gradNorm',
      dtypes: F32,
      doc: 'one element ([] or [1]): the norm of the scaled gradients (globalNorm); not finite means some gradient overflowed',
    },
    { name: 'scale', dtypes: F32, doc: 'one element: the loss scale S, updated in place' },
    {
      name: 'growth',
      dtypes: ['i32'],
      doc: 'one element: finite steps in a row since S last changed, updated in place',
    },
    {
      name: 'step',
      dtypes: ['i32'],
      optional: true,
      doc: "one element: the optimizer's step number, advanced by one after a finite step (a skipped step is not counted)",
    },
  ],
  attributes: {
    growthFactor: {
      kind: 'number',
      default: 2,
      above: 0,
      finite: true,
      doc: 'S after growthInterval finite steps in a row is S times this; above 1',
    },
    backoffFactor: {
      kind: 'number',
      default: 0.5,
      above: 0,
      doc: 'S after a non-finite step is S times this; below 1',
    },
    growthInterval: {
      kind: 'number',
      default: 2000,
      integer: true,
      min: 1,
      doc: 'finite steps in a row before S grows',
    },
  },
  infer([gradNorm, scale, growth, step], { growthFactor, backoffFactor, growthInterval }) {
    const check = new ArgCheck('updateLossScale');
    const one = (argument: string, shape: readonly number[]) =>
      check.shape(sizeOf(shape) === 1, argument, 'a one-element value', '[] or [1]', shape);
    one('gradNorm', gradNorm!.shape);
    one('scale', scale!.shape);
    one('growth', growth!.shape);
    if (step) one('step', step.shape);
    check.attr(growthFactor > 1, 'growthFactor', 'growing must raise the scale', '> 1', growthFactor);
    check.attr(backoffFactor < 1, 'backoffFactor', 'backing off must lower the scale', '< 1', backoffFactor);
    check.attr(
      growthInterval <= MAX_GROWTH_INTERVAL,
      'growthInterval',
      'the count of finite steps is an i32',
      `<= ${MAX_GROWTH_INTERVAL}`,
      growthInterval,
    );
    return [
      { name: 'scale', shape: scale!.shape, dtype: 'f32', aliasOf: 1 },
      { name: 'growth', shape: growth!.shape, dtype: 'i32', aliasOf: 2 },
      ...(step ? [{ name: 'step', shape: step.shape, dtype: 'i32' as const, aliasOf: 3 }] : []),
    ];
  },
  reference([gradNorm, scale, growth, step], { growthFactor, backoffFactor, growthInterval }) {
    let s = Number(scale![0]);
    let count = Number(growth![0]);
    const finite = Number.isFinite(Number(gradNorm![0]));
    if (!finite) {
      s = Math.fround(s * backoffFactor);
      count = 0;
    } else if (count + 1 >= growthInterval) {
      const grown = Math.fround(s * growthFactor);
      if (Number.isFinite(grown)) s = grown;
      count = 0;
    } else {
      count += 1;
    }
    const out = [Float32Array.of(s), Int32Array.of(count)];
    if (step) out.push(Int32Array.of(Number(step[0]) + (finite ? 1 : 0)));
    return out;
  },
  cost: () => ({ flops: 4, bytes: 4 * F32_BYTES }),
});
