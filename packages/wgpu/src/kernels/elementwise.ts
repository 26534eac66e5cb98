import {
  ACTIVATION_BACKWARD_MAPS,
  ACTIVATION_FORMULAS,
  ACTIVATION_MAPS,
  type AttrValues,
  add,
  biasAdd,
  bytesPerElement,
  clip,
  clipBackward,
  div,
  exp,
  FLOAT,
  formulas,
  type KernelSpec,
  kernelBroadcastPlan,
  MAX_BROADCAST_RANK,
  mul,
  type NoAttrs,
  scale,
  sub,
  swiglu,
  swigluBackward,
  UnsupportedOnBackendError,
} from '@rayo/core';
import { type AnyWgpuKernel, bindingRanges, type Operand, operandRange, wgpuKernel } from '../kernel.js';
import { paramLayout } from '../params.js';
import {
  ACTIVATION_FUNCTIONS_WGSL,
  activationGradientWgsl,
  activationWgsl,
  formulaWgsl,
  IS_NAN,
} from '../wgsl/activations.js';
import { bindingType, declareHalf, loadScalar, type Storage, storageOf } from '../wgsl/half.js';
import { ShaderModule } from '../wgsl/module.js';
import { elementGrid, elementIndex, WG } from './common.js';

// ---- binary with broadcasting ------------------------------------------------

const MAX_RANK = MAX_BROADCAST_RANK;
const BINARY_PARAMS = paramLayout([
  ['n', 'u32'],
  ['base', 'u32'],
  ...Array.from({ length: MAX_RANK }, (_, d) => [`d${d}`, 'u32'] as const),
  ...Array.from({ length: MAX_RANK }, (_, d) => [`sa${d}`, 'u32'] as const),
  ...Array.from({ length: MAX_RANK }, (_, d) => [`sb${d}`, 'u32'] as const),
] as const);

// An operand with as many elements as the output is read at the output's own
// index (and may be bound in pieces); a broadcast one through the stride plan.
function binaryShader(
  op: string,
  rank: number,
  kernel: string,
  directA: boolean,
  directB: boolean,
  dtype: Storage,
) {
  const element = (e: string) => `var rest = params.base + ${e};
  var ia = 0u;
  var ib = 0u;
${Array.from({ length: rank }, (_, k) => {
  const d = rank - 1 - k; // innermost first
  return `  { let c = rest % params.d${d}; rest = rest / params.d${d}; ia += c * params.sa${d}; ib += c * params.sb${d}; }`;
}).join('\n')}
  let x = ${loadScalar(dtype, 'a', directA ? e : 'ia')};
  let z = ${loadScalar(dtype, 'b', directB ? e : 'ib')};
  let y = ${op};`;
  return {
    key: `elementwise/binary/${kernel}/rank${rank}/${directA ? 'a' : 'A'}${directB ? 'b' : 'B'}${dtype === 'f32' ? '' : `/${dtype}`}`,
    kernel,
    code: () => {
      const module = new ShaderModule();
      module.storage('a', bindingType(dtype, false), 'read');
      module.storage('b', bindingType(dtype, false), 'read');
      module.storage('y_buf', bindingType(dtype, false), 'read_write');
      declareHalf(module, dtype);
      return module.build(BINARY_PARAMS, WG, elementBody(dtype, ['y'], element));
    },
  };
}

/**
 * WGSL body of a one-element-per-index kernel over `params.n` elements:
 * `element(e)` computes f32 `let`s named `outputs` for element e, stored to
 * `<name>_buf`. Half outputs go a u32 word (two elements) per invocation,
 * each rounded once; the upper half of a last, odd word is kept.
 */
function elementBody(dtype: Storage, outputs: readonly string[], element: (e: string) => string): string {
  if (dtype === 'f32') {
    return `  ${elementIndex('params.n')}
  {
  ${element('i')}
${outputs.map((name) => `  ${name}_buf[i] = ${name};`).join('\n')}
  }`;
  }
  return `  ${elementIndex('(params.n + 1u) / 2u')}
${outputs.map((name) => `  var ${name}_bits = select(0u, ${name}_buf[i] & 0xffff0000u, 2u * i + 1u >= params.n);`).join('\n')}
  for (var j = 0u; j < 2u; j++) {
    let e = 2u * i + j;
    if (e < params.n) {
  ${element('e')}
${outputs.map((name) => `      ${name}_bits |= to_${dtype}(${name}) << (16u * j);`).join('\n')}
    }
  }
${outputs.map((name) => `  ${name}_buf[i] = ${name}_bits;`).join('\n')}`;
}

function binary(spec: KernelSpec<NoAttrs>, op: string): AnyWgpuKernel {
  return wgpuKernel(
    spec,
    (encoder, { inputs, outputs, io }) => {
      const out = outputs[0]!;
      if (out.size === 0) return;
      const plan = kernelBroadcastPlan(spec.name, out.shape, io.inputs[0]!.shape, io.inputs[1]!.shape);
      const [a, b] = [inputs[0]!, inputs[1]!];
      const directA = a.size === out.size;
      const directB = b.size === out.size;
      for (const [t, direct, argument] of [
        [a, directA, 'a'],
        [b, directB, 'b'],
      ] as const) {
        const bytes = t.size * bytesPerElement(t.dtype);
        if (!direct && bytes > encoder.maxBindingBytes) {
          throw new UnsupportedOnBackendError(
            'a broadcast operand larger than one storage binding cannot be split',
            {
              operation: spec.name,
              argument,
              expected: `<= ${encoder.maxBindingBytes} bytes, or as many elements as the output`,
              actual: `${bytes} bytes`,
            },
          );
        }
      }
      const dtype = storageOf(out.dtype);
      const shader = binaryShader(op, plan.dims.length, spec.name, directA, directB, dtype);
      for (const range of bindingRanges(out.size, bytesPerElement(out.dtype), encoder)) {
        const values: Record<string, number> = { n: range.count, base: range.start };
        for (let d = 0; d < MAX_RANK; d++) {
          values[`d${d}`] = plan.dims[d] ?? 1;
          values[`sa${d}`] = plan.sa[d] ?? 0;
          values[`sb${d}`] = plan.sb[d] ?? 0;
        }
        const piece = (t: typeof a, direct: boolean) =>
          direct ? operandRange(t, range.start, range.count) : t;
        encoder.dispatch({
          shader,
          buffers: [piece(a, directA), piece(b, directB), operandRange(out, range.start, range.count)],
          params: { layout: BINARY_PARAMS, values },
          workgroups: elementGrid(encoder, range.count),
        });
      }
    },
    { splitsLargeOperands: true, dtypes: FLOAT },
  );
}

// ---- same-shape maps: any inputs, any outputs, one statement block -----------

interface MapDecl<A extends AttrValues> {
  readonly spec: KernelSpec<A>;
  /** Input binding names, in spec order. */
  readonly inputs: readonly string[];
  /** Output binding names, in spec order. */
  readonly outputs: readonly string[];
  /** WGSL statements; inputs are read into `let` values of the same names, outputs assigned by name. */
  readonly body: string;
  /** f32 attributes passed as uniform parameters `params.<name>`. */
  readonly attrs?: readonly (keyof A & string)[];
  /** Inputs read at another index than the element's (biasAdd's bias): WGSL of it from the element index. */
  readonly indexed?: Readonly<Record<string, (e: string) => string>>;
}

function map<A extends AttrValues>(decl: MapDecl<A>): AnyWgpuKernel {
  const attrs = decl.attrs ?? [];
  const layout = paramLayout([
    ['n', 'u32'],
    ['m', 'u32'],
    ['base', 'u32'],
    ...attrs.map((a) => [a, 'f32'] as const),
  ]);
  const indexed = decl.indexed ?? {};
  // Inputs in `dtype`, outputs in `outType` (SwiGLU writing a product's half operand: attrs.out).
  const shader = (dtype: Storage, outType: Storage) => ({
    key: `elementwise/map/${decl.spec.name}${dtype === 'f32' ? '' : `/${dtype}`}${outType === dtype ? '' : `/to_${outType}`}`,
    kernel: decl.spec.name,
    code: () => {
      const module = new ShaderModule();
      for (const name of decl.inputs) module.storage(`${name}_buf`, bindingType(dtype, false), 'read');
      for (const name of decl.outputs)
        module.storage(`${name}_buf`, bindingType(outType, false), 'read_write');
      module.declare(ACTIVATION_FUNCTIONS_WGSL);
      for (const type of new Set([dtype, outType])) declareHalf(module, type);
      const element = (e: string) => `${decl.inputs
        .map((name) => `  let ${name} = ${loadScalar(dtype, `${name}_buf`, indexed[name]?.(e) ?? e)};`)
        .join('\n')}
${decl.outputs.map((name) => `  var ${name}: f32;`).join('\n')}
  ${decl.body}`;
      return module.build(layout, WG, elementBody(outType, decl.outputs, element));
    },
  });
  return wgpuKernel(
    decl.spec,
    (encoder, { inputs, outputs, attrs: values }) => {
      const n = outputs[0]!.size;
      if (n === 0) return;
      const dtype = storageOf(inputs[0]!.dtype);
      const outType = storageOf(outputs[0]!.dtype);
      // Element-aligned inputs and outputs are bound range by range; indexed
      // ones (a bias) whole, read at the global index `base + i`. Ranges of
      // mixed dtypes start where the narrower is aligned and fit the wider.
      const [narrow, wide] = [inputs[0]!, outputs[0]!]
        .map((t) => bytesPerElement(t.dtype))
        .sort((a, b) => a - b);
      const maxBindingBytes = Math.floor((encoder.maxBindingBytes * narrow!) / wide!);
      const limit = { limits: encoder.limits, maxBindingBytes };
      for (const range of bindingRanges(n, narrow!, limit)) {
        const params: Record<string, number> = {
          n: range.count,
          m: inputs[inputs.length - 1]!.size,
          base: range.start,
        };
        for (const a of attrs) params[a] = values[a] as number;
        const piece = (t: Operand, name?: string) =>
          name !== undefined && indexed[name] ? t : operandRange(t, range.start, range.count);
        encoder.dispatch({
          shader: shader(dtype, outType),
          buffers: [...inputs.map((t, k) => piece(t!, decl.inputs[k])), ...outputs.map((t) => piece(t))],
          params: { layout, values: params },
          workgroups: elementGrid(encoder, range.count),
        });
      }
    },
    { splitsLargeOperands: true, dtypes: FLOAT },
  );
}

export const ELEMENTWISE_KERNELS: readonly AnyWgpuKernel[] = [
  binary(add, 'x + z'),
  binary(sub, 'x - z'),
  binary(mul, 'x * z'),
  binary(div, 'x / z'),
  ...(['relu', 'gelu', 'silu', 'sigmoid', 'tanh'] as const).map((name) =>
    map({
      spec: ACTIVATION_MAPS[name],
      inputs: ['x'],
      outputs: ['y'],
      body: `y = ${activationWgsl(name, 'x')};`,
    }),
  ),
  map({ spec: exp, inputs: ['x'], outputs: ['y'], body: 'y = exp(x);' }),
  map({
    spec: scale,
    inputs: ['x'],
    outputs: ['y'],
    body: 'y = params.alpha * x + params.beta;',
    attrs: ['alpha', 'beta'],
  }),
  map({
    spec: clip,
    inputs: ['x'],
    outputs: ['y'],
    // NaN passes through as in the reference (Math.max keeps it); WGSL's max and min need not.
    body: `y = select(min(max(x, params.min), params.max), x, ${IS_NAN('x')});`,
    attrs: ['min', 'max'],
  }),
  map({
    spec: swiglu,
    inputs: ['gate', 'up'],
    outputs: ['y'],
    body: `y = ${activationWgsl('silu', 'gate')} * up;`,
  }),
  map({
    spec: biasAdd,
    inputs: ['x', 'bias'],
    outputs: ['y'],
    indexed: { bias: (e) => `(params.base + ${e}) % params.m` },
    body: 'y = x + bias;',
  }),
  ...(['relu', 'gelu', 'silu'] as const).map((name) =>
    map({
      spec: ACTIVATION_BACKWARD_MAPS[name],
      inputs: ['dy', 'x'],
      outputs: ['dx'],
      body: `dx = dy * ${activationGradientWgsl(name, 'x')};`,
    }),
  ),
  ...(['sigmoid', 'tanh'] as const).map((name) =>
    map({
      spec: ACTIVATION_BACKWARD_MAPS[name],
      inputs: ['dy', 'y'],
      outputs: ['dx'],
      body: `dx = ${formulaWgsl(formulas.mul(formulas.variable('dy'), ACTIVATION_FORMULAS[name].gradient.formula))};`,
    }),
  ),
  map({
    spec: clipBackward,
    inputs: ['dy', 'x'],
    outputs: ['dx'],
    attrs: ['min', 'max'],
    body: 'dx = select(0.0, dy, x >= params.min && x <= params.max);',
  }),
  map({
    spec: swigluBackward,
    inputs: ['dy', 'gate', 'up'],
    outputs: ['dgate', 'dup'],
    body: `dgate = dy * up * ${activationGradientWgsl('silu', 'gate')};\n  dup = dy * ${activationWgsl('silu', 'gate')};`,
  }),
];
