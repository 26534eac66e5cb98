import {
  type AttrValues,
  add,
  biasAdd,
  clip,
  clipBackward,
  div,
  exp,
  gelu,
  geluBackward,
  type KernelSpec,
  mul,
  type NoAttrs,
  relu,
  reluBackward,
  scale,
  sigmoid,
  sigmoidBackward,
  silu,
  siluBackward,
  stridesOf,
  sub,
  swiglu,
  swigluBackward,
  tanh,
  tanhBackward,
  UnsupportedOnBackendError,
} from '@rayo/core';
import {
  type AnyWgpuKernel,
  bindingRanges,
  type Operand,
  operandRange,
  storage,
  uniform,
  wgpuKernel,
} from '../kernel.js';
import { paramLayout } from '../params.js';
import { BUILTINS, elementGrid, elementIndex, WG, WGSL_MATH } from './common.js';

// ---- binary with broadcasting ------------------------------------------------

const MAX_RANK = 6;
const BINARY_PARAMS = paramLayout([
  ['n', 'u32'],
  ['base', 'u32'],
  ...Array.from({ length: MAX_RANK }, (_, d) => [`d${d}`, 'u32'] as const),
  ...Array.from({ length: MAX_RANK }, (_, d) => [`sa${d}`, 'u32'] as const),
  ...Array.from({ length: MAX_RANK }, (_, d) => [`sb${d}`, 'u32'] as const),
] as const);

/**
 * Broadcast strides of both operands over the output, with adjacent axes
 * merged where neither operand breaks contiguity, so most calls end up rank 1
 * or 2.
 */
export function broadcastPlan(out: readonly number[], a: readonly number[], b: readonly number[]) {
  const eff = (shape: readonly number[]) => {
    const strides = stridesOf(shape);
    return out.map((_, i) => {
      const j = i - (out.length - shape.length);
      return j < 0 || shape[j] === 1 ? 0 : strides[j]!;
    });
  };
  const dims = [...out];
  const sa = eff(a);
  const sb = eff(b);
  for (let i = dims.length - 2; i >= 0; i--) {
    const inner = dims[i + 1]!;
    if (sa[i] === sa[i + 1]! * inner && sb[i] === sb[i + 1]! * inner) {
      dims[i] = dims[i]! * inner;
      sa[i] = sa[i + 1]!;
      sb[i] = sb[i + 1]!;
      dims.splice(i + 1, 1);
      sa.splice(i + 1, 1);
      sb.splice(i + 1, 1);
    }
  }
  return { dims, sa, sb };
}

// An operand with as many elements as the output is read at the output's own
// index (and may be bound in pieces); a broadcast one through the stride plan.
function binaryShader(op: string, rank: number, kernel: string, directA: boolean, directB: boolean) {
  return {
    key: `elementwise/binary/${kernel}/rank${rank}/${directA ? 'a' : 'A'}${directB ? 'b' : 'B'}`,
    kernel,
    code: () => `
${BINARY_PARAMS.wgsl}
${storage(0, 'a', 'f32', 'read')}
${storage(1, 'b', 'f32', 'read')}
${storage(2, 'y', 'f32', 'read_write')}
${uniform(3)}
@compute @workgroup_size(${WG})
fn main(${BUILTINS}) {
  ${elementIndex('params.n')}
  var rest = params.base + i;
  var ia = 0u;
  var ib = 0u;
${Array.from({ length: rank }, (_, k) => {
  const d = rank - 1 - k; // innermost first
  return `  { let c = rest % params.d${d}; rest = rest / params.d${d}; ia += c * params.sa${d}; ib += c * params.sb${d}; }`;
}).join('\n')}
  let x = a[${directA ? 'i' : 'ia'}];
  let z = b[${directB ? 'i' : 'ib'}];
  y[i] = ${op};
}`,
  };
}

function binary(spec: KernelSpec<NoAttrs>, op: string): AnyWgpuKernel {
  return wgpuKernel(
    spec,
    (encoder, { inputs, outputs, io }) => {
      const out = outputs[0]!;
      if (out.size === 0) return;
      const plan = broadcastPlan(out.shape, io.inputs[0]!.shape, io.inputs[1]!.shape);
      if (plan.dims.length > MAX_RANK) {
        throw new UnsupportedOnBackendError('broadcast pattern has too many independent axes', {
          kernel: spec.name,
          argument: 'b',
          expected: `at most ${MAX_RANK} after merging contiguous axes`,
          actual: String(plan.dims.length),
        });
      }
      const [a, b] = [inputs[0]!, inputs[1]!];
      const directA = a.size === out.size;
      const directB = b.size === out.size;
      for (const [t, direct, argument] of [
        [a, directA, 'a'],
        [b, directB, 'b'],
      ] as const) {
        if (!direct && t.size * 4 > encoder.maxBindingBytes) {
          throw new UnsupportedOnBackendError(
            'a broadcast operand larger than one storage binding cannot be split',
            {
              kernel: spec.name,
              argument,
              expected: `<= ${encoder.maxBindingBytes} bytes, or as many elements as the output`,
              actual: `${t.size * 4} bytes`,
            },
          );
        }
      }
      const shader = binaryShader(op, plan.dims.length, spec.name, directA, directB);
      for (const range of bindingRanges(out.size, 4, encoder)) {
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
    { splitsLargeOperands: true },
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
  /** Element count, when an input is broadcast (biasAdd's bias is indexed by the body). */
  readonly indexed?: readonly string[];
}

function map<A extends AttrValues>(decl: MapDecl<A>): AnyWgpuKernel {
  const attrs = decl.attrs ?? [];
  const layout = paramLayout([
    ['n', 'u32'],
    ['m', 'u32'],
    ['base', 'u32'],
    ...attrs.map((a) => [a, 'f32'] as const),
  ]);
  const indexed = new Set(decl.indexed ?? []);
  const shader = {
    key: `elementwise/map/${decl.spec.name}`,
    kernel: decl.spec.name,
    code: () => `
${layout.wgsl}
${WGSL_MATH}
${decl.inputs.map((name, b) => storage(b, `${name}_buf`, 'f32', 'read')).join('\n')}
${decl.outputs.map((name, k) => storage(decl.inputs.length + k, `${name}_buf`, 'f32', 'read_write')).join('\n')}
${uniform(decl.inputs.length + decl.outputs.length)}
@compute @workgroup_size(${WG})
fn main(${BUILTINS}) {
  ${elementIndex('params.n')}
${decl.inputs
  .filter((name) => !indexed.has(name))
  .map((name) => `  let ${name} = ${name}_buf[i];`)
  .join('\n')}
${decl.outputs.map((name) => `  var ${name}: f32;`).join('\n')}
  ${decl.body}
${decl.outputs.map((name) => `  ${name}_buf[i] = ${name};`).join('\n')}
}`,
  };
  return wgpuKernel(
    decl.spec,
    (encoder, { inputs, outputs, attrs: values }) => {
      const n = outputs[0]!.size;
      if (n === 0) return;
      // Element-aligned inputs and outputs are bound range by range; indexed
      // ones (a bias) whole, read at the global index `base + i`.
      for (const range of bindingRanges(n, 4, encoder)) {
        const params: Record<string, number> = {
          n: range.count,
          m: inputs[inputs.length - 1]!.size,
          base: range.start,
        };
        for (const a of attrs) params[a] = values[a] as number;
        const piece = (t: Operand, name?: string) =>
          name !== undefined && indexed.has(name) ? t : operandRange(t, range.start, range.count);
        encoder.dispatch({
          shader,
          buffers: [...inputs.map((t, k) => piece(t!, decl.inputs[k])), ...outputs.map((t) => piece(t))],
          params: { layout, values: params },
          workgroups: elementGrid(encoder, range.count),
        });
      }
    },
    { splitsLargeOperands: true },
  );
}

export const ELEMENTWISE_KERNELS: readonly AnyWgpuKernel[] = [
  binary(add, 'x + z'),
  binary(sub, 'x - z'),
  binary(mul, 'x * z'),
  binary(div, 'x / z'),
  map({ spec: relu, inputs: ['x'], outputs: ['y'], body: 'y = max(x, 0.0);' }),
  map({ spec: gelu, inputs: ['x'], outputs: ['y'], body: 'y = gelu_f(x);' }),
  map({ spec: silu, inputs: ['x'], outputs: ['y'], body: 'y = silu_f(x);' }),
  map({ spec: sigmoid, inputs: ['x'], outputs: ['y'], body: 'y = sigmoid_f(x);' }),
  map({ spec: tanh, inputs: ['x'], outputs: ['y'], body: 'y = tanh_f(x);' }),
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
    body: 'y = min(max(x, params.min), params.max);',
    attrs: ['min', 'max'],
  }),
  map({ spec: swiglu, inputs: ['gate', 'up'], outputs: ['y'], body: 'y = silu_f(gate) * up;' }),
  map({
    spec: biasAdd,
    inputs: ['x', 'bias'],
    outputs: ['y'],
    indexed: ['bias'],
    body: 'y = x + bias_buf[(params.base + i) % params.m];',
  }),
  map({ spec: reluBackward, inputs: ['dy', 'x'], outputs: ['dx'], body: 'dx = select(0.0, dy, x > 0.0);' }),
  map({ spec: geluBackward, inputs: ['dy', 'x'], outputs: ['dx'], body: 'dx = dy * gelu_grad(x);' }),
  map({ spec: siluBackward, inputs: ['dy', 'x'], outputs: ['dx'], body: 'dx = dy * silu_grad(x);' }),
  map({ spec: sigmoidBackward, inputs: ['dy', 'y'], outputs: ['dx'], body: 'dx = dy * y * (1.0 - y);' }),
  map({ spec: tanhBackward, inputs: ['dy', 'y'], outputs: ['dx'], body: 'dx = dy * (1.0 - y * y);' }),
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
    body: 'dgate = dy * up * silu_grad(gate);\n  dup = dy * silu_f(gate);',
  }),
];
