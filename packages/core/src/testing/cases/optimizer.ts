import * as k from '../../kernels/optimizer.js';
import type { Shape } from '../../shape.js';
import {
  deviceValue,
  type FamilyCases,
  f32,
  type InputInit,
  type InputSample,
  i32,
  invalid,
  invalidCalls,
  newFamilyCases,
  valid,
} from '../cases.js';

const { cases, errors } = newFamilyCases();

// ---- adamwStep ---------------------------------------------------------------

/** param, grad, m and v; v is a second moment, so it is positive. */
const adamwInputs = (shape: Shape) => [f32(shape), f32(shape), f32(shape), f32(shape, 'positive')];

// A large lr and weight decay keep every term of the update above the tolerance.
const ADAMW = { lr: 0.05, weightDecay: 0.1 };
for (const n of [1, 7, 61, 1031]) {
  cases.push(
    valid(k.adamwStep, { label: `[${n}] step 1`, inputs: adamwInputs([n]), attrs: { ...ADAMW, step: 1 } }),
    // At step 7 both bias corrections matter; at 1000 the second one still does.
    valid(k.adamwStep, { label: `[${n}] step 7`, inputs: adamwInputs([n]), attrs: { ...ADAMW, step: 7 } }),
    valid(k.adamwStep, {
      label: `[${n}] step 1000`,
      inputs: adamwInputs([n]),
      attrs: { ...ADAMW, step: 1000 },
    }),
  );
}
cases.push(
  valid(k.adamwStep, {
    label: '[7, 13] step 3, betas 0.8/0.95, eps 0.1 (eps visible)',
    inputs: adamwInputs([7, 13]),
    attrs: { lr: 0.01, beta1: 0.8, beta2: 0.95, eps: 0.1, weightDecay: 0.5, step: 3 },
  }),
  valid(k.adamwStep, {
    label: '[3, 5, 67] step 2, betas 0, no weight decay',
    inputs: adamwInputs([3, 5, 67]),
    attrs: { lr: 0.02, beta1: 0, beta2: 0, weightDecay: 0, step: 2 },
  }),
  valid(k.adamwStep, { label: '[] step 5', inputs: adamwInputs([]), attrs: { ...ADAMW, step: 5 } }),
  valid(k.adamwStep, {
    label: '[1000003] step 1000',
    inputs: adamwInputs([1000003]),
    attrs: { ...ADAMW, step: 1000 },
  }),
);

/** A one-element f32 tensor holding `value`: a learning rate read on the device. */
const deviceLr = (value: number): InputSample => ({ shape: [1], dtype: 'f32', init: () => [value] });

// Step and learning rate read on the device, alone and together, at steps where
// the bias corrections differ (1: largest, 7, 1000: the second one still matters).
for (const [n, step, lr] of [
  [1, 1, 0.05],
  [61, 7, 0.003],
  [1031, 1000, 0.05],
] as const) {
  cases.push(
    valid(k.adamwStep, {
      label: `[${n}] device step ${step}`,
      inputs: [...adamwInputs([n]), deviceValue(step)],
      attrs: { lr, weightDecay: 0.1 },
    }),
    valid(k.adamwStep, {
      label: `[${n}] device lr ${lr}`,
      inputs: [...adamwInputs([n]), undefined, deviceLr(lr)],
      attrs: { step, weightDecay: 0.1 },
    }),
    valid(k.adamwStep, {
      label: `[${n}] device step ${step} and lr ${lr}`,
      inputs: [...adamwInputs([n]), deviceValue(step), deviceLr(lr)],
      attrs: { weightDecay: 0.1 },
    }),
  );
}
cases.push(
  valid(k.adamwStep, {
    label: '[7, 13] device step 3 and lr, betas 0.8/0.95, eps 0.1',
    inputs: [...adamwInputs([7, 13]), deviceValue(3), deviceLr(0.01)],
    attrs: { beta1: 0.8, beta2: 0.95, eps: 0.1, weightDecay: 0.5 },
  }),
);

/** param, grad, m and v of the given shapes (v positive, as adamwInputs gives them). */
const adamwOf = (shapes: Shape[]) => [
  f32(shapes[0]!),
  f32(shapes[1]!),
  f32(shapes[2]!),
  f32(shapes[3]!, 'positive'),
];
const ok = [[4], [4], [4], [4]];
errors.push(
  ...invalidCalls(k.adamwStep, [
    ['grad of another shape', adamwOf([[4], [5], [4], [4]]), 'shape', 'grad', { lr: 0.1, step: 1 }],
    [
      'm of another shape',
      adamwOf([
        [2, 3],
        [2, 3],
        [3, 2],
        [2, 3],
      ]),
      'shape',
      'm',
      { lr: 0.1, step: 1 },
    ],
    ['v of another rank', adamwOf([[4], [4], [4], [1, 4]]), 'shape', 'v', { lr: 0.1, step: 1 }],
    ['lr missing', adamwOf(ok), 'argument', 'attrs.lr', { step: 1 }],
    ['negative lr', adamwOf(ok), 'argument', 'attrs.lr', { lr: -0.1, step: 1 }],
    ['beta1 = 1', adamwOf(ok), 'argument', 'attrs.beta1', { lr: 0.1, step: 1, beta1: 1 }],
    ['negative beta1', adamwOf(ok), 'argument', 'attrs.beta1', { lr: 0.1, step: 1, beta1: -0.5 }],
    ['beta2 above 1', adamwOf(ok), 'argument', 'attrs.beta2', { lr: 0.1, step: 1, beta2: 1.5 }],
    ['eps = 0', adamwOf(ok), 'argument', 'attrs.eps', { lr: 0.1, step: 1, eps: 0 }],
    [
      'negative weight decay',
      adamwOf(ok),
      'argument',
      'attrs.weightDecay',
      { lr: 0.1, step: 1, weightDecay: -0.01 },
    ],
    ['step missing', adamwOf(ok), 'argument', 'attrs.step', { lr: 0.1 }],
    ['step 0', adamwOf(ok), 'argument', 'attrs.step', { lr: 0.1, step: 0 }],
    ['fractional step', adamwOf(ok), 'argument', 'attrs.step', { lr: 0.1, step: 1.5 }],
  ]),
  ...invalidCalls(k.adamwStep, [
    [
      'a device step and attrs.step both',
      [...adamwInputs([4]), deviceValue(2)],
      'argument',
      'attrs.step',
      { lr: 0.1, step: 2 },
    ],
    [
      'a device lr and attrs.lr both',
      [...adamwInputs([4]), undefined, deviceLr(0.1)],
      'argument',
      'attrs.lr',
      { lr: 0.1, step: 2 },
    ],
    ['a device step of two elements', [...adamwInputs([4]), i32([2], 1, 4)], 'shape', 'step', { lr: 0.1 }],
    ['a device step of f32', [...adamwInputs([4]), deviceLr(2)], 'dtype', 'step', { lr: 0.1 }],
    ['a device lr of i32', [...adamwInputs([4]), undefined, deviceValue(1)], 'dtype', 'lr', { step: 1 }],
  ]),
);

// ---- sgdStep -------------------------------------------------------------------

const sgdInputs = (shape: Shape) => [f32(shape), f32(shape), f32(shape)];
const SGD = {
  plain: { lr: 0.1 },
  'plain, weight decay 0.5, dampening ignored': { lr: 0.1, weightDecay: 0.5, dampening: 0.5 },
  'momentum 0.9': { lr: 0.1, momentum: 0.9 },
  'momentum 0.9, dampening 0.25, weight decay 0.5': {
    lr: 0.1,
    momentum: 0.9,
    dampening: 0.25,
    weightDecay: 0.5,
  },
  'nesterov 0.9, weight decay 0.5': { lr: 0.1, momentum: 0.9, weightDecay: 0.5, nesterov: true },
} as const;
for (const n of [1, 13, 257, 4099]) {
  for (const [what, attrs] of Object.entries(SGD)) {
    cases.push(valid(k.sgdStep, { label: `[${n}] ${what}`, inputs: sgdInputs([n]), attrs }));
  }
}
cases.push(
  valid(k.sgdStep, {
    label: '[7, 3, 5] momentum 0.5',
    inputs: sgdInputs([7, 3, 5]),
    attrs: { lr: 0.3, momentum: 0.5 },
  }),
  valid(k.sgdStep, {
    label: '[100003] nesterov 0.9, weight decay 0.5',
    inputs: sgdInputs([100003]),
    attrs: SGD['nesterov 0.9, weight decay 0.5'],
  }),
);

const sgd = (label: string, shapes: Shape[], attrs: Partial<Parameters<typeof k.sgdStep.infer>[1]>) => ({
  label,
  inputs: shapes.map((s) => f32(s)),
  attrs,
});
const ok3 = [[6], [6], [6]];
errors.push(
  invalid(k.sgdStep, {
    ...sgd('grad of another shape', [[6], [7], [6]], { lr: 0.1 }),
    error: 'shape',
    argument: 'grad',
  }),
  invalid(k.sgdStep, {
    ...sgd('momentumBuffer of another shape', [[2, 3], [2, 3], [6]], { lr: 0.1, momentum: 0.9 }),
    error: 'shape',
    argument: 'momentumBuffer',
  }),
  invalid(k.sgdStep, { ...sgd('lr missing', ok3, {}), error: 'argument', argument: 'attrs.lr' }),
  invalid(k.sgdStep, {
    ...sgd('momentum = 1', ok3, { lr: 0.1, momentum: 1 }),
    error: 'argument',
    argument: 'attrs.momentum',
  }),
  invalid(k.sgdStep, {
    ...sgd('negative momentum', ok3, { lr: 0.1, momentum: -0.1 }),
    error: 'argument',
    argument: 'attrs.momentum',
  }),
  invalid(k.sgdStep, {
    ...sgd('dampening above 1', ok3, { lr: 0.1, momentum: 0.9, dampening: 2 }),
    error: 'argument',
    argument: 'attrs.dampening',
  }),
  invalid(k.sgdStep, {
    ...sgd('negative weight decay', ok3, { lr: 0.1, weightDecay: -1 }),
    error: 'argument',
    argument: 'attrs.weightDecay',
  }),
  invalid(k.sgdStep, {
    ...sgd('nesterov without momentum', ok3, { lr: 0.1, nesterov: true }),
    error: 'argument',
    argument: 'attrs.nesterov',
  }),
  invalid(k.sgdStep, {
    ...sgd('nesterov with dampening', ok3, { lr: 0.1, momentum: 0.9, dampening: 0.1, nesterov: true }),
    error: 'argument',
    argument: 'attrs.nesterov',
  }),
  invalid(k.sgdStep, {
    ...sgd('nesterov not a boolean', ok3, { lr: 0.1, momentum: 0.9, nesterov: 'yes' as unknown as boolean }),
    error: 'argument',
    argument: 'attrs.nesterov',
  }),
);

// ---- clipByGlobalNorm -------------------------------------------------------------

// The norm is a reduction: allow for a tree (or blocked) sum in f32. Every
// output is the norm's relative error at most, so the absolute part stays tiny.
const SMALL = { rtol: 1e-5, atol: 1e-7 };
const LARGE = { rtol: 1e-4, atol: 1e-7 };
const clips: [string, Shape[], number, number | undefined][] = [
  // label, grad shapes, maxNorm, eps
  ['one [1], clipped', [[1]], 1e-3, undefined],
  ['one [1], not clipped', [[1]], 1e6, undefined],
  ['[7], [3, 5], [61], clipped', [[7], [3, 5], [61]], 0.5, undefined],
  ['[7], [3, 5], [61], not clipped', [[7], [3, 5], [61]], 1e6, undefined],
  ['[1031], [13, 67], [], [257, 3], clipped', [[1031], [13, 67], [], [257, 3]], 1, undefined],
  ['[13], [67], clipped, eps 0', [[13], [67]], 0.25, 0],
  ['[17] ×9 (many inputs), clipped, eps 0.5', Array.from({ length: 9 }, () => [17]), 0.5, 0.5],
];
for (const [label, shapes, maxNorm, eps] of clips) {
  cases.push(
    valid(k.clipByGlobalNorm, {
      label,
      inputs: shapes.map((s) => f32(s)),
      attrs: eps === undefined ? { maxNorm } : { maxNorm, eps },
      tolerance: SMALL,
    }),
  );
}
cases.push(
  valid(k.clipByGlobalNorm, {
    label: '[100003], [317, 331], clipped',
    inputs: [f32([100003]), f32([317, 331])],
    attrs: { maxNorm: 1 },
    tolerance: LARGE,
  }),
  valid(k.clipByGlobalNorm, {
    label: '[100003], [317, 331], not clipped',
    inputs: [f32([100003]), f32([317, 331])],
    attrs: { maxNorm: 1e6 },
    tolerance: LARGE,
  }),
);

errors.push(
  ...invalidCalls(k.clipByGlobalNorm, [
    ['no gradients', [], 'argument', 'inputs', { maxNorm: 1 }],
    ['an i32 second gradient', [f32([3]), { shape: [4], dtype: 'i32' }], 'dtype', 'grads[1]', { maxNorm: 1 }],
    ['maxNorm missing', [f32([3])], 'argument', 'attrs.maxNorm', {}],
    ['maxNorm = 0', [f32([3])], 'argument', 'attrs.maxNorm', { maxNorm: 0 }],
    ['negative eps', [f32([3])], 'argument', 'attrs.eps', { maxNorm: 1, eps: -1e-6 }],
  ]),
);

// ---- globalNorm -------------------------------------------------------------------

for (const [label, shapes] of clips.map(
  ([label, shapes]) => [label.replace(/, (not )?clipped.*/, ''), shapes] as const,
)) {
  cases.push(valid(k.globalNorm, { label, inputs: shapes.map((s) => f32(s)), tolerance: SMALL }));
}
cases.push(
  valid(k.globalNorm, {
    label: '[100003], [317, 331]',
    inputs: [f32([100003]), f32([317, 331])],
    tolerance: LARGE,
  }),
);
errors.push(
  ...invalidCalls(k.globalNorm, [
    ['no tensors', [], 'argument', 'inputs'],
    ['an i32 second tensor', [f32([3]), { shape: [4], dtype: 'i32' }], 'dtype', 'xs[1]'],
  ]),
);

// ---- multiTensorAdamw ----------------------------------------------------------------

/** The four inputs of each tensor, after step, lr and gradNorm. */
const quads = (shapes: readonly Shape[]) => shapes.flatMap(adamwInputs);
/** A one-element norm (shape [] as globalNorm returns it, or [1]) holding `value`. */
const deviceNorm = (value: number, shape: Shape = []): InputSample => ({ shape, init: () => [value] });

const ODD_SET: Shape[] = [[1], [3], [1000], [4097]];
const MIXED_SET: Shape[] = [[7, 13], [], [3, 5, 67], [1], [64]];
// More tensors than one CUDA launch's parameters hold; sizes around the vector widths.
const MANY_SET: Shape[] = Array.from({ length: 150 }, (_, i) => (i % 3 === 0 ? [i + 1] : [i % 7, 5]));
const multiSets: [string, Shape[]][] = [
  ['[1], [3], [1000], [4097]', ODD_SET],
  ['[7, 13], [], [3, 5, 67], [1], [64]', MIXED_SET],
  ['150 tensors of 0…150 elements', MANY_SET],
  ['one [1031]', [[1031]]],
];
for (const [what, shapes] of multiSets) {
  cases.push(
    valid(k.multiTensorAdamw, {
      label: `${what}, step 7`,
      inputs: [undefined, undefined, undefined, undefined, ...quads(shapes)],
      attrs: { lr: 0.05, weightDecay: [0.1], step: 7 },
    }),
    // Clip active (scale 0.25) and inactive (norm below maxNorm), step and lr on the device.
    valid(k.multiTensorAdamw, {
      label: `${what}, device step 3 and lr, clipped`,
      inputs: [deviceValue(3), deviceLr(0.02), deviceNorm(4), undefined, ...quads(shapes)],
      attrs: { weightDecay: [0.1], maxNorm: 1 },
    }),
    valid(k.multiTensorAdamw, {
      label: `${what}, device step 1000 and lr, not clipped`,
      inputs: [deviceValue(1000), deviceLr(0.05), deviceNorm(0.5, [1]), undefined, ...quads(shapes)],
      attrs: { weightDecay: [0.1], maxNorm: 1 },
    }),
  );
}
cases.push(
  valid(k.multiTensorAdamw, {
    label: '[1], [3], [1000], [4097], a weight decay per tensor, step 2, clipped with clipEps 0.5',
    inputs: [undefined, undefined, deviceNorm(3), undefined, ...quads(ODD_SET)],
    attrs: { lr: 0.05, weightDecay: [0.5, 0, 0.1, 0], step: 2, maxNorm: 0.75, clipEps: 0.5 },
  }),
  valid(k.multiTensorAdamw, {
    label: '[7, 13], [], [3, 5, 67], [1], [64], device step 5, betas 0.8/0.95, eps 0.1',
    inputs: [deviceValue(5), undefined, undefined, undefined, ...quads(MIXED_SET)],
    attrs: { lr: 0.01, beta1: 0.8, beta2: 0.95, eps: 0.1, weightDecay: [0, 0.5, 0, 0.5, 0] },
  }),
  valid(k.multiTensorAdamw, {
    label: '[1000003], [3], device lr, clipped',
    inputs: [undefined, deviceLr(0.05), deviceNorm(2), undefined, ...quads([[1000003], [3]])],
    attrs: { step: 1000, weightDecay: [0.1], maxNorm: 1 },
  }),
);

// Loss scaling: gradients of a loss scaled by S (so S times an f32 gradient),
// unscaled inside the update, with and without the clip acting on the
// unscaled norm; and steps skipped for an inf or NaN gradient (its norm not
// finite), which must leave param, m and v as they were.
const LOSS_SCALE = 4096;
const scaledGrad: InputInit = (rng, size) =>
  Array.from({ length: size }, () => LOSS_SCALE * rng.uniform(-1, 1));
/** param, grad × S, m, v of each shape, one gradient element `bad` (inf or NaN) where given. */
const scaledQuads = (shapes: readonly Shape[], bad?: number) =>
  shapes.flatMap((shape, j) => {
    const grad: InputInit =
      bad !== undefined && j === shapes.length - 1
        ? (rng, size) => {
            const g = Array.from({ length: size }, () => LOSS_SCALE * rng.uniform(-1, 1));
            g[size >> 1] = bad;
            return g;
          }
        : scaledGrad;
    return [f32(shape), f32(shape, grad), f32(shape), f32(shape, 'positive')];
  });
const deviceScale = (value: number): InputSample => ({ shape: [1], init: () => [value] });
for (const [what, shapes] of multiSets.slice(0, 3)) {
  cases.push(
    // The unscaled norm 4 is clipped to 1: the factor is 1 / (4 S).
    valid(k.multiTensorAdamw, {
      label: `${what}, loss scale ${LOSS_SCALE}, clipped`,
      inputs: [
        deviceValue(3),
        deviceLr(0.02),
        deviceNorm(4 * LOSS_SCALE),
        deviceScale(LOSS_SCALE),
        ...scaledQuads(shapes),
      ],
      attrs: { weightDecay: [0.1], maxNorm: 1 },
    }),
    valid(k.multiTensorAdamw, {
      label: `${what}, loss scale ${LOSS_SCALE}, not clipped, step 7`,
      inputs: [
        undefined,
        undefined,
        deviceNorm(0.5 * LOSS_SCALE),
        deviceScale(LOSS_SCALE),
        ...scaledQuads(shapes),
      ],
      attrs: { lr: 0.05, weightDecay: [0.1], step: 7 },
    }),
    valid(k.multiTensorAdamw, {
      label: `${what}, loss scale, an inf gradient: skipped`,
      inputs: [
        deviceValue(3),
        deviceLr(0.02),
        deviceNorm(Infinity),
        deviceScale(LOSS_SCALE),
        ...scaledQuads(shapes, Infinity),
      ],
      attrs: { weightDecay: [0.1], maxNorm: 1 },
    }),
    valid(k.multiTensorAdamw, {
      label: `${what}, loss scale, a NaN gradient: skipped`,
      inputs: [
        undefined,
        undefined,
        deviceNorm(Number.NaN, [1]),
        deviceScale(LOSS_SCALE),
        ...scaledQuads(shapes, Number.NaN),
      ],
      attrs: { lr: 0.05, weightDecay: [0.1], step: 7 },
    }),
  );
}

const none = [undefined, undefined, undefined, undefined];
const ok4 = quads([[4]]);
errors.push(
  ...invalidCalls(k.multiTensorAdamw, [
    [
      'grad of the second tensor of another shape',
      [...none, ...ok4, f32([2]), f32([3]), f32([2]), f32([2])],
      'shape',
      'tensors[5]',
      { lr: 0.1, step: 1 },
    ],
    [
      'a tensor without its v',
      [...none, ...ok4, f32([4]), f32([4]), f32([4])],
      'shape',
      'tensors',
      { lr: 0.1, step: 1 },
    ],
    ['no tensors', none, 'argument', 'inputs', { lr: 0.1, step: 1 }],
    [
      'an i32 param',
      [...none, ...ok4, { shape: [4], dtype: 'i32' }, f32([4]), f32([4]), f32([4])],
      'dtype',
      'tensors[4]',
      { lr: 0.1, step: 1 },
    ],
    [
      'three weight decays for two tensors',
      [...none, ...ok4, ...ok4],
      'argument',
      'attrs.weightDecay',
      { lr: 0.1, step: 1, weightDecay: [0.1, 0, 0.1] },
    ],
    [
      'a negative weight decay',
      [...none, ...ok4, ...ok4],
      'argument',
      'attrs.weightDecay[1]',
      { lr: 0.1, step: 1, weightDecay: [0.1, -0.1] },
    ],
    [
      'maxNorm without gradNorm',
      [...none, ...ok4],
      'argument',
      'attrs.maxNorm',
      { lr: 0.1, step: 1, maxNorm: 1 },
    ],
    [
      'a gradNorm of two elements',
      [undefined, undefined, f32([2]), undefined, ...ok4],
      'shape',
      'gradNorm',
      { lr: 0.1, step: 1, maxNorm: 1 },
    ],
    [
      'maxNorm = 0',
      [undefined, undefined, deviceNorm(1), undefined, ...ok4],
      'argument',
      'attrs.maxNorm',
      { lr: 0.1, step: 1, maxNorm: 0 },
    ],
    [
      'a device step and attrs.step both',
      [deviceValue(2), undefined, undefined, undefined, ...ok4],
      'argument',
      'attrs.step',
      { lr: 0.1, step: 2 },
    ],
    [
      'a device step of f32',
      [deviceLr(2), undefined, undefined, undefined, ...ok4],
      'dtype',
      'step',
      { lr: 0.1 },
    ],
    ['beta1 = 1', [...none, ...ok4], 'argument', 'attrs.beta1', { lr: 0.1, step: 1, beta1: 1 }],
    [
      'a loss scale without gradNorm',
      [undefined, undefined, undefined, deviceScale(2), ...ok4],
      'shape',
      'lossScale',
      { lr: 0.1, step: 1 },
    ],
    [
      'a loss scale of two elements',
      [undefined, undefined, deviceNorm(1), f32([2]), ...ok4],
      'shape',
      'lossScale',
      { lr: 0.1, step: 1 },
    ],
    [
      'an i32 loss scale',
      [undefined, undefined, deviceNorm(1), deviceValue(2), ...ok4],
      'dtype',
      'lossScale',
      { lr: 0.1, step: 1 },
    ],
  ]),
);

export const optimizerCases: FamilyCases = { cases, errors };
