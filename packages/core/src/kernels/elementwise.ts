import { bytesPerElement, type HostArray } from '../dtype.js';
import { defineKernel, type KernelSpec } from '../kernel.js';
import { broadcastIndexMap, broadcastShapes, sizeOf } from '../shape.js';
import {
  ACTIVATION_FORMULAS,
  ACTIVATION_FUNCTIONS,
  geluGrad,
  type LinearActivation,
  outputGradientFunction,
  siluGrad,
  siluOf,
} from './activations.js';
import { ArgCheck } from './check.js';
import { bytesOf, FLOAT, type NoAttrs, type OutDType, outDtypeAttr, outDtypeOf } from './vocabulary.js';

const FAMILY = 'elementwise';

// ---- binary, with NumPy broadcasting ---------------------------------------

function binaryKernel(
  name: string,
  summary: string,
  fn: (a: number, b: number) => number,
): KernelSpec<NoAttrs> {
  return defineKernel<NoAttrs>({
    name,
    family: FAMILY,
    summary,
    inputs: [
      { name: 'a', dtypes: FLOAT },
      { name: 'b', dtypes: FLOAT },
    ],
    attributes: {},
    infer([a, b]) {
      const shape = broadcastShapes(a!.shape, b!.shape, { operation: name, argument: 'b' });
      return [{ name: 'y', shape, dtype: a!.dtype }];
    },
    reference([a, b], _attrs, io) {
      const outShape = io.outputs[0]!.shape;
      const ia = broadcastIndexMap(io.inputs[0]!.shape, outShape);
      const ib = broadcastIndexMap(io.inputs[1]!.shape, outShape);
      const y = new Float32Array(ia.length);
      for (let i = 0; i < y.length; i++) y[i] = fn(a![ia[i]!]!, b![ib[i]!]!);
      return [y];
    },
    cost([a, b]) {
      const n = sizeOf(broadcastShapes(a!.shape, b!.shape, { operation: name, argument: 'b' }));
      return { flops: n, bytes: bytesOf(a) + bytesOf(b) + n * bytesPerElement(a!.dtype) };
    },
  });
}

export const add = binaryKernel('add', 'y = a + b (broadcasting)', (a, b) => a + b);
export const sub = binaryKernel('sub', 'y = a − b (broadcasting)', (a, b) => a - b);
export const mul = binaryKernel('mul', 'y = a · b (broadcasting)', (a, b) => a * b);
export const div = binaryKernel('div', 'y = a / b (broadcasting)', (a, b) => a / b);

// ---- unary ---------------------------------------------------------------

function mapF32(x: HostArray, fn: (v: number) => number): Float32Array {
  const y = new Float32Array(x.length);
  for (let i = 0; i < x.length; i++) y[i] = fn(x[i]!);
  return y;
}

function unaryKernel(name: string, summary: string, flopsPerElement: number, fn: (x: number) => number) {
  return defineKernel<NoAttrs>({
    name,
    family: FAMILY,
    summary,
    inputs: [{ name: 'x', dtypes: FLOAT }],
    attributes: {},
    infer: ([x]) => [{ name: 'y', shape: x!.shape, dtype: x!.dtype }],
    reference: ([x]) => [mapF32(x!, fn)],
    cost: ([x]) => ({ flops: flopsPerElement * sizeOf(x!.shape), bytes: 2 * bytesOf(x) }),
  });
}

/** A unary map of an activation of the table: its reference evaluates the table's formula. */
const activationKernel = (name: LinearActivation, summary: string) =>
  unaryKernel(name, summary, ACTIVATION_FORMULAS[name].flops, ACTIVATION_FUNCTIONS[name].f);

export const relu = activationKernel('relu', 'y = max(x, 0)');
export const gelu = activationKernel('gelu', 'y = GELU(x), tanh approximation');
export const silu = activationKernel('silu', 'y = x · sigmoid(x)');
export const sigmoid = activationKernel('sigmoid', 'y = 1 / (1 + e^−x)');
export const tanh = activationKernel('tanh', 'y = tanh(x)');
export const exp = unaryKernel('exp', 'y = e^x', 1, Math.exp);

type ScaleAttrs = { alpha: number; beta: number };
export const scale = defineKernel<ScaleAttrs>({
  name: 'scale',
  family: FAMILY,
  summary: 'y = alpha · x + beta',
  inputs: [{ name: 'x', dtypes: FLOAT }],
  attributes: {
    alpha: { kind: 'number', doc: 'multiplier' },
    beta: { kind: 'number', default: 0, doc: 'added after scaling' },
  },
  infer: ([x]) => [{ name: 'y', shape: x!.shape, dtype: x!.dtype }],
  reference: ([x], { alpha, beta }) => [mapF32(x!, (v) => alpha * v + beta)],
  cost: ([x]) => ({ flops: 2 * sizeOf(x!.shape), bytes: 2 * bytesOf(x) }),
});

type ClipAttrs = { min: number; max: number };
export const clip = defineKernel<ClipAttrs>({
  name: 'clip',
  family: FAMILY,
  summary: 'y = min(max(x, min), max)',
  inputs: [{ name: 'x', dtypes: FLOAT }],
  attributes: { min: { kind: 'number' }, max: { kind: 'number' } },
  infer([x], { min, max }) {
    new ArgCheck('clip').attr(min <= max, 'max', 'max must not be below min', `>= ${min}`, max);
    return [{ name: 'y', shape: x!.shape, dtype: x!.dtype }];
  },
  reference: ([x], { min, max }) => [mapF32(x!, (v) => Math.min(Math.max(v, min), max))],
  cost: ([x]) => ({ flops: 2 * sizeOf(x!.shape), bytes: 2 * bytesOf(x) }),
});

// ---- gated and bias ------------------------------------------------------

export const swiglu = defineKernel<{ out: OutDType }>({
  name: 'swiglu',
  family: FAMILY,
  summary: 'y = silu(gate) · up',
  inputs: [
    { name: 'gate', dtypes: FLOAT },
    { name: 'up', dtypes: FLOAT },
  ],
  attributes: { out: outDtypeAttr("is gate's") },
  infer([gate, up], { out }) {
    new ArgCheck('swiglu').sameShape('up', up!, gate!.shape, "'gate'");
    return [{ name: 'y', shape: gate!.shape, dtype: outDtypeOf(out, gate!.dtype) }];
  },
  reference([g, u]) {
    const y = new Float32Array(g!.length);
    for (let i = 0; i < y.length; i++) y[i] = siluOf(g![i]!) * u![i]!;
    return [y];
  },
  cost: ([g], { out }) => ({
    flops: 5 * sizeOf(g!.shape),
    bytes: 2 * bytesOf(g) + bytesOf({ shape: g!.shape, dtype: outDtypeOf(out, g!.dtype) }),
  }),
});

export const biasAdd = defineKernel<NoAttrs>({
  name: 'biasAdd',
  family: FAMILY,
  summary: 'y[..., j] = x[..., j] + bias[j]',
  inputs: [
    { name: 'x', dtypes: FLOAT, doc: '[..., N]' },
    { name: 'bias', dtypes: FLOAT, doc: '[N]' },
  ],
  attributes: {},
  infer([x, bias]) {
    const check = new ArgCheck('biasAdd');
    check.minRank('x', x!, 1, '[..., N]');
    check.rank('bias', bias!, 1, '[N]');
    check.dim('bias', bias!, 0, x!.shape[x!.shape.length - 1]!, "the last dimension of 'x'");
    return [{ name: 'y', shape: x!.shape, dtype: x!.dtype }];
  },
  reference([x, bias]) {
    const n = bias!.length;
    const y = new Float32Array(x!.length);
    for (let i = 0; i < y.length; i++) y[i] = x![i]! + bias![i % n]!;
    return [y];
  },
  cost: ([x, b]) => ({
    flops: sizeOf(x!.shape),
    bytes: 2 * bytesOf(x) + bytesOf(b),
  }),
});

// ---- backward --------------------------------------------------------------

function unaryBackward(
  name: string,
  summary: string,
  second: 'x' | 'y',
  grad: (v: number) => number,
): KernelSpec<NoAttrs> {
  return defineKernel<NoAttrs>({
    name,
    family: FAMILY,
    summary,
    inputs: [
      { name: 'dy', dtypes: FLOAT },
      { name: second, dtypes: FLOAT, doc: second === 'x' ? 'the forward input' : 'the forward output' },
    ],
    attributes: {},
    infer(inputs) {
      new ArgCheck(name).sameShape(second, inputs[1]!, inputs[0]!.shape, "'dy'");
      return [{ name: 'dx', shape: inputs[0]!.shape, dtype: inputs[0]!.dtype }];
    },
    reference([dy, v]) {
      const dx = new Float32Array(dy!.length);
      for (let i = 0; i < dx.length; i++) dx[i] = dy![i]! * grad(v![i]!);
      return [dx];
    },
    cost: ([dy]) => ({ flops: 4 * sizeOf(dy!.shape), bytes: 3 * bytesOf(dy) }),
  });
}

export const reluBackward = unaryBackward(
  'reluBackward',
  'dx = dy · (x > 0)',
  'x',
  ACTIVATION_FUNCTIONS.relu.grad,
);
export const geluBackward = unaryBackward('geluBackward', "dx = dy · gelu'(x)", 'x', geluGrad);
export const siluBackward = unaryBackward('siluBackward', "dx = dy · silu'(x)", 'x', siluGrad);
export const sigmoidBackward = unaryBackward(
  'sigmoidBackward',
  'dx = dy · y · (1 − y)',
  'y',
  outputGradientFunction('sigmoid'),
);
export const tanhBackward = unaryBackward(
  'tanhBackward',
  'dx = dy · (1 − y²)',
  'y',
  outputGradientFunction('tanh'),
);

/** The unary map of each activation of the table (but `none`), by name. */
export const ACTIVATION_MAPS = { relu, gelu, silu, sigmoid, tanh } as const;
/** Their backward maps: dx from dy and x, or from dy and y where the gradient is a formula of the output. */
export const ACTIVATION_BACKWARD_MAPS = {
  relu: reluBackward,
  gelu: geluBackward,
  silu: siluBackward,
  sigmoid: sigmoidBackward,
  tanh: tanhBackward,
} as const;

export const clipBackward = defineKernel<ClipAttrs>({
  name: 'clipBackward',
  family: FAMILY,
  summary: 'dx = dy where min <= x <= max, else 0',
  inputs: [
    { name: 'dy', dtypes: FLOAT },
    { name: 'x', dtypes: FLOAT, doc: 'the forward input' },
  ],
  attributes: { min: { kind: 'number' }, max: { kind: 'number' } },
  infer([dy, x], { min, max }) {
    const check = new ArgCheck('clipBackward');
    check.sameShape('x', x!, dy!.shape, "'dy'");
    check.attr(min <= max, 'max', 'max must not be below min', `>= ${min}`, max);
    return [{ name: 'dx', shape: dy!.shape, dtype: dy!.dtype }];
  },
  reference([dy, x], { min, max }) {
    const dx = new Float32Array(dy!.length);
    for (let i = 0; i < dx.length; i++) dx[i] = x![i]! >= min && x![i]! <= max ? dy![i]! : 0;
    return [dx];
  },
  cost: ([dy]) => ({ flops: 2 * sizeOf(dy!.shape), bytes: 3 * bytesOf(dy) }),
});

export const swigluBackward = defineKernel<NoAttrs>({
  name: 'swigluBackward',
  family: FAMILY,
  summary: "dgate = dy · up · silu'(gate), dup = dy · silu(gate)",
  inputs: [
    { name: 'dy', dtypes: FLOAT },
    { name: 'gate', dtypes: FLOAT },
    { name: 'up', dtypes: FLOAT },
  ],
  attributes: {},
  infer([dy, gate, up]) {
    const check = new ArgCheck('swigluBackward');
    check.sameShape('gate', gate!, dy!.shape, "'dy'");
    check.sameShape('up', up!, dy!.shape, "'dy'");
    return [
      { name: 'dgate', shape: dy!.shape, dtype: dy!.dtype },
      { name: 'dup', shape: dy!.shape, dtype: dy!.dtype },
    ];
  },
  reference([dy, gate, up]) {
    const n = dy!.length;
    const dgate = new Float32Array(n);
    const dup = new Float32Array(n);
    for (let i = 0; i < n; i++) {
      dgate[i] = dy![i]! * up![i]! * siluGrad(gate![i]!);
      dup[i] = dy![i]! * siluOf(gate![i]!);
    }
    return [dgate, dup];
  },
  cost: ([dy]) => ({ flops: 10 * sizeOf(dy!.shape), bytes: 5 * bytesOf(dy) }),
});
