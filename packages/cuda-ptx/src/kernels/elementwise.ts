import {
  ACTIVATION_BACKWARD_MAPS,
  ACTIVATION_FORMULAS,
  ACTIVATION_MAPS,
  type AttrValues,
  add,
  biasAdd,
  clip,
  clipBackward,
  div,
  exp,
  FLOAT,
  type KernelSpec,
  kernelBroadcastPlan,
  type LinearActivation,
  MAX_BROADCAST_RANK,
  mul,
  type NoAttrs,
  scale,
  sub,
  swiglu,
  swigluBackward,
} from '@rayo/core';
import { type AnyCudaKernel, cudaKernel, type LaunchValue } from '../kernel.js';
import type { KernelBuilder } from '../ptx/kernel.js';
import { PtxModule } from '../ptx/module.js';
import type { F32, Param } from '../ptx/operands.js';
import type { ParamType } from '../ptx/types.js';
import { activationF32, activationGradF32, outputGradientF32 } from './activations.js';
import { BLOCK, checkElementCount, gridFor, loadPointer, loadU32 } from './common.js';
import { arithmeticF32, clampF32, expF32 } from './math.js';
import {
  type FloatStorage,
  loadOneAsF32,
  STORAGE_BYTES,
  storageKey,
  storageOf,
  storeFromF32,
} from './storage.js';

// ---- binary with broadcasting ----------------------------------------------------

/** The most independent axes a broadcast may have after merging; each is three kernel parameters. */
export const MAX_RANK = MAX_BROADCAST_RANK;

export type BinaryOp = 'add' | 'sub' | 'mul' | 'div';

const BINARY_SPECS: Readonly<Record<BinaryOp, KernelSpec<NoAttrs>>> = { add, sub, mul, div };

const BINARY_OPERATORS = { add: '+', sub: '-', mul: '*', div: '/' } as const;

function binaryOp(k: KernelBuilder, op: BinaryOp, x: F32, z: F32): F32 {
  return arithmeticF32(k, BINARY_OPERATORS[op], k.reg('f32'), x, z);
}

export function binaryEntry(op: BinaryOp, rank: number): string {
  return `binary_${op}_r${rank}`;
}

export function binaryKey(op: BinaryOp, rank: number, type: FloatStorage = 'f32'): string {
  return `elementwise/binary/${op}/rank${rank}${storageKey([type])}`;
}

/**
 * y[i] = a[ia] op b[ib] over a grid-stride loop, where ia and ib come from
 * i's coordinates over `rank` axes (innermost first: c = rest mod d_k).
 */
export function binaryModule(op: BinaryOp, rank: number, type: FloatStorage = 'f32'): PtxModule {
  const bytes = STORAGE_BYTES[type];
  const params: Record<string, ParamType> = { a: 'ptr', b: 'ptr', y: 'ptr', n: 'u32' };
  for (const prefix of ['d', 'sa', 'sb']) for (let d = 0; d < rank; d++) params[`${prefix}${d}`] = 'u32';
  const m = new PtxModule();
  m.entry(
    binaryEntry(op, rank),
    params,
    (k, p: Readonly<Record<string, Param<ParamType>>>) => {
      const a = loadPointer(k, p, 'a');
      const b = loadPointer(k, p, 'b');
      const y = loadPointer(k, p, 'y');
      const n = loadU32(k, p, 'n');
      const dims = Array.from({ length: rank }, (_, d) => loadU32(k, p, `d${d}`));
      const sa = Array.from({ length: rank }, (_, d) => loadU32(k, p, `sa${d}`));
      const sb = Array.from({ length: rank }, (_, d) => loadU32(k, p, `sb${d}`));
      k.gridStrideLoop(n, (i) => {
        const rest = k.mov('u32', k.reg('u32'), i);
        const ia = k.mov('u32', k.reg('u32'), 0);
        const ib = k.mov('u32', k.reg('u32'), 0);
        for (let d = rank - 1; d >= 1; d--) {
          const q = k.div('u32', k.reg('u32'), rest, dims[d]!);
          const c = k.sub('u32', k.reg('u32'), rest, k.mulLo('u32', k.reg('u32'), q, dims[d]!));
          k.madLo('u32', ia, c, sa[d]!, ia);
          k.madLo('u32', ib, c, sb[d]!, ib);
          k.mov('u32', rest, q);
        }
        // The outermost coordinate is what is left: rest < d0.
        k.madLo('u32', ia, rest, sa[0]!, ia);
        k.madLo('u32', ib, rest, sb[0]!, ib);
        const x = loadOneAsF32(k, type, k.elementAddress(a, ia, bytes));
        const z = loadOneAsF32(k, type, k.elementAddress(b, ib, bytes));
        storeFromF32(k, type, k.elementAddress(y, i, bytes), binaryOp(k, op, x, z));
      });
    },
    { maxThreadsPerBlock: BLOCK },
  );
  return m;
}

function binary(op: BinaryOp): AnyCudaKernel {
  const spec = BINARY_SPECS[op];
  return cudaKernel(
    spec,
    (encoder, { inputs, outputs, io }) => {
      const out = outputs[0]!;
      if (out.size === 0) return;
      checkElementCount(spec.name, 'y', out.size);
      const plan = kernelBroadcastPlan(spec.name, out.shape, io.inputs[0]!.shape, io.inputs[1]!.shape);
      const rank = plan.dims.length;
      const args: Record<string, LaunchValue> = { a: inputs[0]!, b: inputs[1]!, y: out, n: out.size };
      for (let d = 0; d < rank; d++) {
        args[`d${d}`] = plan.dims[d]!;
        args[`sa${d}`] = plan.sa[d]!;
        args[`sb${d}`] = plan.sb[d]!;
      }
      const type = storageOf(out);
      encoder.launch({
        key: binaryKey(op, rank, type),
        module: () => binaryModule(op, rank, type),
        entry: binaryEntry(op, rank),
        grid: gridFor(encoder.device, out.size),
        block: BLOCK,
        args,
      });
    },
    { dtypes: FLOAT },
  );
}

// ---- same-shape maps: any inputs and outputs, one body ---------------------------

/** Values a map body reads: its inputs at the element, and its f32 attributes. */
export type MapValues = Readonly<Record<string, F32>>;

export interface MapDecl<A extends AttrValues> {
  readonly spec: KernelSpec<A>;
  /** Input parameter names, in spec order. */
  readonly inputs: readonly string[];
  /** Output parameter names, in spec order. */
  readonly outputs: readonly string[];
  /** Attributes passed as f32 parameters, read by the body under their names. */
  readonly attrs?: readonly (keyof A & string)[];
  /** An input read at i mod m (m its length) instead of i: biasAdd's bias. */
  readonly periodic?: string;
  /** Computes every output from the inputs and attributes of one element. */
  readonly body: (k: KernelBuilder, v: MapValues) => MapValues;
}

export function mapEntry(spec: KernelSpec<AttrValues>): string {
  return `ew_${spec.name}`;
}

export function mapKey(
  spec: KernelSpec<AttrValues>,
  type: FloatStorage = 'f32',
  outType: FloatStorage = type,
): string {
  return `elementwise/map/${spec.name}${storageKey(outType === type ? [type] : [type, outType])}`;
}

/**
 * The module of a map whose inputs are stored as `type` and outputs as
 * `outType` (an f32 SwiGLU writing a product's bf16 operand).
 */
export function mapModule<A extends AttrValues>(
  decl: MapDecl<A>,
  type: FloatStorage = 'f32',
  outType: FloatStorage = type,
): PtxModule {
  const bytes = STORAGE_BYTES[type];
  const outBytes = STORAGE_BYTES[outType];
  const attrs = decl.attrs ?? [];
  const params: Record<string, ParamType> = {};
  for (const name of [...decl.inputs, ...decl.outputs]) params[name] = 'ptr';
  params.n = 'u32';
  if (decl.periodic) params.m = 'u32';
  for (const name of attrs) params[name] = 'f32';
  const m = new PtxModule();
  m.entry(
    mapEntry(decl.spec as KernelSpec<AttrValues>),
    params,
    (k, p: Readonly<Record<string, Param<ParamType>>>) => {
      const pointers = new Map(
        [...decl.inputs, ...decl.outputs].map((name) => [name, loadPointer(k, p, name)]),
      );
      const n = loadU32(k, p, 'n');
      const period = decl.periodic ? loadU32(k, p, 'm') : undefined;
      const attrValues: Record<string, F32> = {};
      for (const name of attrs) attrValues[name] = k.ldParam(p[name] as Param<'f32'>);
      k.gridStrideLoop(n, (i) => {
        const values: Record<string, F32> = { ...attrValues };
        for (const name of decl.inputs) {
          const index = name === decl.periodic ? k.rem('u32', k.reg('u32'), i, period!) : i;
          values[name] = loadOneAsF32(k, type, k.elementAddress(pointers.get(name)!, index, bytes));
        }
        const results = decl.body(k, values);
        for (const name of decl.outputs) {
          storeFromF32(k, outType, k.elementAddress(pointers.get(name)!, i, outBytes), results[name]!);
        }
      });
    },
    { maxThreadsPerBlock: BLOCK },
  );
  return m;
}

function map<A extends AttrValues>(decl: MapDecl<A>): AnyCudaKernel {
  const spec = decl.spec;
  const entry = mapEntry(spec as KernelSpec<AttrValues>);
  return cudaKernel(
    spec,
    (encoder, { inputs, outputs, attrs }) => {
      // Inputs share one dtype (the spec's group); outputs may be another (attrs.out).
      const type = storageOf(inputs[0]!);
      const outType = storageOf(outputs[0]!);
      const key = mapKey(spec as KernelSpec<AttrValues>, type, outType);
      const build = () => mapModule(decl, type, outType);
      const n = outputs[0]!.size;
      if (n === 0) return;
      checkElementCount(spec.name, decl.outputs[0]!, n);
      const args: Record<string, LaunchValue> = { n };
      decl.inputs.forEach((name, i) => {
        args[name] = inputs[i]!;
      });
      decl.outputs.forEach((name, i) => {
        args[name] = outputs[i]!;
      });
      if (decl.periodic) args.m = inputs[decl.inputs.indexOf(decl.periodic)]!.size;
      for (const name of decl.attrs ?? []) args[name] = attrs[name] as number;
      encoder.launch({ key, module: build, entry, grid: gridFor(encoder.device, n), block: BLOCK, args });
    },
    { dtypes: FLOAT },
  );
}

function f32(k: KernelBuilder): F32 {
  return k.reg('f32');
}

/** The backward maps whose product takes its register before the gradient's (the order of the emitted PTX). */
const DY_FIRST: ReadonlySet<LinearActivation> = new Set(['gelu', 'silu']);

/** Declarations of the map kernels, exported for the PTX tests. */
export const MAP_DECLS: readonly MapDecl<AttrValues>[] = [
  ...(['relu', 'gelu', 'silu', 'sigmoid', 'tanh'] as const).map(
    (name): MapDecl<AttrValues> => ({
      spec: ACTIVATION_MAPS[name],
      inputs: ['x'],
      outputs: ['y'],
      body: (k, { x }) => ({ y: activationF32(k, name, x!) }),
    }),
  ),
  { spec: exp, inputs: ['x'], outputs: ['y'], body: (k, { x }) => ({ y: expF32(k, x!) }) },
  {
    spec: scale as KernelSpec<AttrValues>,
    inputs: ['x'],
    outputs: ['y'],
    attrs: ['alpha', 'beta'],
    // One rounding, as close to the reference's alpha·x + beta as f32 gets.
    body: (k, { x, alpha, beta }) => ({ y: k.fma('f32', f32(k), alpha!, x!, beta!) }),
  },
  {
    spec: clip as KernelSpec<AttrValues>,
    inputs: ['x'],
    outputs: ['y'],
    attrs: ['min', 'max'],
    body: (k, { x, min, max }) => ({ y: clampF32(k, x!, min!, max!) }),
  },
  {
    spec: swiglu,
    inputs: ['gate', 'up'],
    outputs: ['y'],
    body: (k, { gate, up }) => ({
      y: k.mul('f32', f32(k), activationF32(k, 'silu', gate!), up!, { rnd: 'rn' }),
    }),
  },
  {
    spec: biasAdd,
    inputs: ['x', 'bias'],
    outputs: ['y'],
    periodic: 'bias',
    body: (k, { x, bias }) => ({ y: k.add('f32', f32(k), x!, bias!, { rnd: 'rn' }) }),
  },
  ...(['relu', 'gelu', 'silu', 'sigmoid', 'tanh'] as const).map((name): MapDecl<AttrValues> => {
    const of = ACTIVATION_FORMULAS[name].gradient.of;
    return {
      spec: ACTIVATION_BACKWARD_MAPS[name],
      inputs: ['dy', of],
      outputs: ['dx'],
      // dy · act′, a product as in the reference (so inf·0 is NaN here too).
      body: (k, v) => {
        if (DY_FIRST.has(name)) {
          return { dx: k.mul('f32', f32(k), v.dy!, activationGradF32(k, name, v.x!), { rnd: 'rn' }) };
        }
        const g = of === 'x' ? activationGradF32(k, name, v.x!) : outputGradientF32(k, name, v.y!);
        return { dx: k.mul('f32', f32(k), v.dy!, g, { rnd: 'rn' }) };
      },
    };
  }),
  {
    spec: clipBackward as KernelSpec<AttrValues>,
    inputs: ['dy', 'x'],
    outputs: ['dx'],
    attrs: ['min', 'max'],
    body: (k, { dy, x, min, max }) => {
      const lo = k.setp('ge', 'f32', k.reg('pred'), x!, min!);
      const hi = k.setp('le', 'f32', k.reg('pred'), x!, max!);
      const inside = k.and('pred', k.reg('pred'), lo, hi);
      return { dx: k.selp('f32', f32(k), dy!, 0, inside) };
    },
  },
  {
    spec: swigluBackward,
    inputs: ['dy', 'gate', 'up'],
    outputs: ['dgate', 'dup'],
    body: (k, { dy, gate, up }) => {
      const dyUp = k.mul('f32', f32(k), dy!, up!, { rnd: 'rn' });
      return {
        dgate: k.mul('f32', f32(k), dyUp, activationGradF32(k, 'silu', gate!), { rnd: 'rn' }),
        dup: k.mul('f32', f32(k), dy!, activationF32(k, 'silu', gate!), { rnd: 'rn' }),
      };
    },
  },
];

export const BINARY_OPS: readonly BinaryOp[] = ['add', 'sub', 'mul', 'div'];

export const ELEMENTWISE_KERNELS: readonly AnyCudaKernel[] = [
  ...BINARY_OPS.map(binary),
  ...MAP_DECLS.map((decl) => map(decl)),
];
