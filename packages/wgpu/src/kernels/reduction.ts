import { argmax, FLOAT, isHalf, type KernelSpec, max, sizeOf, sum, sumSquares } from '@rayo/core';
import { type AnyWgpuKernel, gridFor, type KernelEncoder, type Operand, wgpuKernel } from '../kernel.js';
import { paramLayout } from '../params.js';
import type { ShaderSource } from '../pipelines.js';
import {
  bindingType,
  halfFunctions,
  loadScalar,
  quadType,
  type Storage,
  storageOf,
  unpackQuad,
} from '../wgsl/half.js';
import { linearWorkgroup, type Scalar, ShaderModule } from '../wgsl/module.js';
import {
  ACCUMULATORS,
  type Combine,
  declareNegInf,
  declareRowInput,
  MAX,
  NEG_INF,
  type RowInput,
  rowGrid,
  rowInputKey,
  rowInputLoad,
  rowInputType,
  rowPrologue,
  SUM,
  segmentReduce,
  stridedAccumulate,
  threadsPerRow,
} from '../wgsl/rowReduce.js';
import { WG } from './common.js';
import { encodeWithF32Activations } from './halfEdges.js';

// ---- reductions ----------------------------------------------------------------

export interface ReduceOp {
  readonly name: string;
  /** WGSL of the element `v` as it enters the reduction. */
  readonly element: (v: string) => string;
  readonly combine: Combine;
  /** WGSL identity of `combine`. */
  readonly identity: string;
  /** The op that reduces partial results of this one. */
  readonly partials: () => ReduceOp;
}

const SUM_OP: ReduceOp = {
  name: 'sum',
  element: (v) => v,
  combine: SUM,
  identity: '0.0',
  partials: () => SUM_OP,
};
const MAX_OP: ReduceOp = {
  name: 'max',
  element: (v) => v,
  combine: MAX,
  identity: NEG_INF,
  partials: () => MAX_OP,
};
const SUM_SQUARES_OP: ReduceOp = {
  name: 'sumSquares',
  element: (v) => `${v} * ${v}`,
  combine: SUM,
  identity: '0.0',
  partials: () => SUM_OP,
};
const REDUCE_OPS: readonly ReduceOp[] = [SUM_OP, MAX_OP, SUM_SQUARES_OP];

/** Elements per thread a row aims for (measured best on an H100 among 4, 8 and 16). */
const ELEMENTS_PER_THREAD = 8;

const ROW_PARAMS = paramLayout([
  ['rows', 'u32'],
  ['n', 'u32'],
] as const);

const inputLoad = (x: RowInput) => (index: string) => rowInputLoad(x, 'x', index);

/** A module reading `x` into f32 `out`, with `reduce` over segments of `threads`. */
function reduceModule(op: ReduceOp, threads: number, scalar: RowInput, out: string): ShaderModule {
  const module = new ShaderModule();
  module.storage('x', rowInputType(scalar), 'read');
  declareRowInput(module, scalar);
  module.storage(out, 'f32', 'read_write');
  declareNegInf(module);
  segmentReduce(module, 'reduce', threads, op.combine);
  return module;
}

/** One row of `n` per segment of `threads` invocations; `WG / threads` rows per workgroup. */
export function rowReduceShader(
  op: ReduceOp,
  threads: number,
  kernel: string,
  scalar: RowInput = 'f32',
): ShaderSource {
  return {
    key: `reduction/rows/${op.name}/${rowInputKey(scalar)}/t${threads}/acc${ACCUMULATORS}/wg${WG}`,
    kernel,
    code: () =>
      reduceModule(op, threads, scalar, 'y').build(
        ROW_PARAMS,
        WG,
        `${rowPrologue(threads, 'params.n')}
  ${stridedAccumulate(op.combine, op.identity, op.element, 'lane', threads, inputLoad(scalar))}
  let total = reduce(lid.x, acc);
  if (row < params.rows && lane == 0u) { y[row] = total; }`,
      ),
  };
}

const SPLIT_PARAMS = paramLayout([
  ['n', 'u32'],
  ['splits', 'u32'],
  ['groups', 'u32'],
] as const);

/**
 * First pass of a split reduction: workgroup w reduces part `w % splits` of
 * row `w / splits` (the row's elements strided by `splits · WG`, so that
 * loads stay coalesced) into `partials[w]`.
 */
export function splitReduceShader(op: ReduceOp, kernel: string, scalar: RowInput = 'f32'): ShaderSource {
  return {
    key: `reduction/split/${op.name}/${rowInputKey(scalar)}/acc${ACCUMULATORS}/wg${WG}`,
    kernel,
    code: () =>
      reduceModule(op, WG, scalar, 'partials').build(
        SPLIT_PARAMS,
        WG,
        `  let w = ${linearWorkgroup};
  let row = w / params.splits;
  let part = w % params.splits;
  let base = row * params.n;
  let end = select(0u, params.n, w < params.groups);
  ${stridedAccumulate(op.combine, op.identity, op.element, `part * ${WG}u + lid.x`, `params.splits * ${WG}u`, inputLoad(scalar))}
  let total = reduce(lid.x, acc);
  if (w < params.groups && lid.x == 0u) { partials[w] = total; }`,
      ),
  };
}

/** Rows at least this long are split over several workgroups when there are few rows. */
const SPLIT_MIN_LENGTH = 8192;
/** Elements per thread a split part aims for. */
const SPLIT_ELEMENTS_PER_THREAD = 8;
/** Enough workgroups to fill a large GPU a few times over. */
const SPLIT_TARGET_GROUPS = 1024;

/**
 * Parts each of `rows` rows of `n` elements (`loads` loads) is split into:
 * 1 below SPLIT_MIN_LENGTH, else enough for `perThread` loads a thread but
 * no more than SPLIT_TARGET_GROUPS workgroups in all.
 */
function rowSplits(rows: number, n: number, loads: number, perThread: number): number {
  if (n < SPLIT_MIN_LENGTH) return 1;
  return Math.min(Math.ceil(loads / (WG * perThread)), Math.ceil(SPLIT_TARGET_GROUPS / rows));
}

/** Reduces `rows` runs of `n` consecutive elements of `x` into `y[row]`. */
function encodeRowReduce(
  encoder: KernelEncoder,
  op: ReduceOp,
  kernel: string,
  x: Operand | GPUBufferBinding,
  y: Operand | GPUBufferBinding,
  rows: number,
  n: number,
  input: RowInput = 'f32',
): void {
  if (rows === 0) return;
  const splits = rowSplits(rows, n, n, SPLIT_ELEMENTS_PER_THREAD);
  if (splits > 1) {
    const groups = rows * splits;
    const partials: GPUBufferBinding = { buffer: encoder.scratch(groups * 4), offset: 0, size: groups * 4 };
    encoder.dispatch({
      shader: splitReduceShader(op, kernel, input),
      buffers: [x, partials],
      params: { layout: SPLIT_PARAMS, values: { n, splits, groups } },
      workgroups: gridFor(groups, encoder.limits),
    });
    encodeRowReduce(encoder, op.partials(), kernel, partials, y, rows, splits);
    return;
  }
  const threads = threadsPerRow(n, ELEMENTS_PER_THREAD);
  encoder.dispatch({
    shader: rowReduceShader(op, threads, kernel, input),
    buffers: [x, y],
    params: { layout: ROW_PARAMS, values: { rows, n } },
    workgroups: rowGrid(encoder, rows, threads),
  });
}

function reduceKernel(spec: KernelSpec<{ axis: 'last' | 'all' }>, op: ReduceOp): AnyWgpuKernel {
  return wgpuKernel(
    spec,
    (encoder, { inputs, outputs, attrs, io }) => {
      const x = inputs[0]!;
      const y = outputs[0]!;
      const shape = io.inputs[0]!.shape;
      const n = attrs.axis === 'all' ? sizeOf(shape) : shape[shape.length - 1]!;
      // An empty run reduces to the identity (0 for the sums; max rejects empty runs).
      // Half x is read in words; a half y (one value per row) is rounded from f32 scratch.
      const input: RowInput = isHalf(x.dtype) ? { words: x.dtype } : 'f32';
      encodeWithF32Activations(encoder, spec.name, {}, { y }, (_, o) =>
        encodeRowReduce(encoder, op, spec.name, x, o.y!, y.size, n, input),
      );
    },
    { dtypes: FLOAT },
  );
}

// ---- argmax --------------------------------------------------------------------

// The (value, index) pairs are compared as u32 keys: the float's bits mapped so
// that unsigned order is numeric order, every NaN mapped above +Infinity and
// -0 onto +0. Integer compares keep NaN and infinities exact where a shader
// compiler may assume floats are finite. A pair is vec2<u32>(key, index);
// equal keys keep the lower index.

const ARGMAX_PARAMS = paramLayout([
  ['rows', 'u32'],
  ['loads', 'u32'],
] as const);

/** Loads a thread issues per loop iteration, in index order. */
const ARGMAX_UNROLL = 4;

const ARGMAX_WGSL = `fn order_key(v: f32) -> u32 {
  let bits = bitcast<u32>(v);
  let mag = bits & 0x7fffffffu;
  if (mag > 0x7f800000u) { return 0xffffffffu; }
  if (mag == 0u) { return 0x80000000u; }
  return select(bits | 0x80000000u, ~bits, bits >= 0x80000000u);
}
fn better(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {
  return select(a, b, b.x > a.x || (b.x == a.x && b.y < a.y));
}`;

const ARGMAX_SPLIT_PARAMS = paramLayout([
  ['loads', 'u32'],
  ['splits', 'u32'],
  ['groups', 'u32'],
] as const);

/**
 * One row per segment of `threads` invocations (a whole workgroup for long
 * rows); x is read as vec4 where `width` is 4. Each invocation scans its
 * loads in increasing index order, so a strictly larger key is the only one
 * that displaces its best; the tree then breaks ties by index. `split`: the
 * first pass over long rows, workgroup w taking part `w % splits` of row
 * `w / splits` (its loads strided by `splits · WG`, so that they stay
 * coalesced) into the pair `partials[w]`, which argmaxPairsShader reduces.
 */
export function argmaxShader(
  threads: number,
  width: 1 | 4,
  storage: Storage = 'f32',
  split = false,
): ShaderSource {
  const components = width === 4 ? ['x', 'y', 'z', 'w'] : [''];
  // Half logits are widened exactly, so the keys order them as the halves.
  const value = (load: string) =>
    width === 4 ? unpackQuad(storage, `x[base + ${load}]`) : loadScalar(storage, 'x', `base + ${load}`);
  const absorb = (load: string) =>
    `{ let v = ${value(load)};${components
      .map(
        (c, i) =>
          ` { let k = order_key(v${c ? `.${c}` : ''}); if (k > best.x) { best = vec2<u32>(k, (${load}) * ${width}u + ${i}u); } }`,
      )
      .join('')} }`;
  const step = split ? `(params.splits * ${WG}u)` : `${threads}u`;
  const at = (u: number) => (u === 0 ? 'j' : `j + ${u}u * ${step}`);
  return {
    key: `reduction/argmax/${storage === 'f32' ? 'f32' : `words-${storage}`}/${split ? 'split' : `t${threads}`}/w${width}/u${ARGMAX_UNROLL}/wg${WG}`,
    kernel: 'argmax',
    code: () => {
      const module = new ShaderModule();
      module.storage('x', width === 4 ? quadType(storage) : bindingType(storage, false), 'read');
      module.storage(split ? 'partials' : 'y', split ? 'vec2<u32>' : 'i32', 'read_write');
      module.declare(ARGMAX_WGSL);
      if (storage === 'bf16') module.declare(halfFunctions(storage));
      segmentReduce(module, 'reduce', threads, (a, b) => `better(${a}, ${b})`, 'vec2<u32>');
      const prologue = split
        ? `  let w = ${linearWorkgroup};
  let row = w / params.splits;
  let base = row * params.loads;
  let end = select(0u, params.loads, w < params.groups);`
        : rowPrologue(threads, 'params.loads');
      return module.build(
        split ? ARGMAX_SPLIT_PARAMS : ARGMAX_PARAMS,
        WG,
        `${prologue}
  // Key 0 is no float's: every element displaces the start.
  var best = vec2<u32>(0u, 0xffffffffu);
  var j = ${split ? `(w % params.splits) * ${WG}u + lid.x` : 'lane'};
  for (; ${at(ARGMAX_UNROLL - 1)} < end; j += ${ARGMAX_UNROLL}u * ${step}) {
    ${Array.from({ length: ARGMAX_UNROLL }, (_, u) => absorb(at(u))).join('\n    ')}
  }
  for (; j < end; j += ${step}) { ${absorb('j')} }
  let total = reduce(lid.x, best);
  ${split ? 'if (w < params.groups && lid.x == 0u) { partials[w] = total; }' : 'if (row < params.rows && lane == 0u) { y[row] = i32(total.y); }'}`,
      );
    },
  };
}

/** The second pass over long rows: each row's `params.loads` pairs (key, index) from argmaxShader's split pass into its index. */
export function argmaxPairsShader(threads: number): ShaderSource {
  return {
    key: `reduction/argmax/pairs/t${threads}/wg${WG}`,
    kernel: 'argmax',
    code: () => {
      const module = new ShaderModule();
      module.storage('partials', 'vec2<u32>', 'read');
      module.storage('y', 'i32', 'read_write');
      module.declare(ARGMAX_WGSL);
      segmentReduce(module, 'reduce', threads, (a, b) => `better(${a}, ${b})`, 'vec2<u32>');
      return module.build(
        ARGMAX_PARAMS,
        WG,
        `${rowPrologue(threads, 'params.loads')}
  var best = vec2<u32>(0u, 0xffffffffu);
  for (var j = lane; j < end; j += ${threads}u) { best = better(best, partials[base + j]); }
  let total = reduce(lid.x, best);
  if (row < params.rows && lane == 0u) { y[row] = i32(total.y); }`,
      );
    },
  };
}

/** Loads per invocation a row aims for before it takes more invocations. */
const ARGMAX_LOADS_PER_THREAD = 8;

const argmaxKernel = wgpuKernel(
  argmax,
  (encoder, { inputs, outputs, io }) => {
    const shape = io.inputs[0]!.shape;
    const n = shape[shape.length - 1]!;
    const rows = outputs[0]!.size;
    if (rows === 0) return;
    const width = n % 4 === 0 ? 4 : 1;
    const loads = n / width;
    const storage = storageOf(inputs[0]!.dtype);
    // Few long rows (a decoder's logits): parts of each row over many workgroups, then their pairs.
    const splits = rowSplits(rows, n, loads, ARGMAX_LOADS_PER_THREAD);
    if (splits > 1) {
      const groups = rows * splits;
      const partials: GPUBufferBinding = { buffer: encoder.scratch(groups * 8), offset: 0, size: groups * 8 };
      encoder.dispatch({
        shader: argmaxShader(WG, width, storage, true),
        buffers: [inputs[0]!, partials],
        params: { layout: ARGMAX_SPLIT_PARAMS, values: { loads, splits, groups } },
        workgroups: gridFor(groups, encoder.limits),
      });
      const threads = threadsPerRow(splits, ARGMAX_LOADS_PER_THREAD);
      encoder.dispatch({
        shader: argmaxPairsShader(threads),
        buffers: [partials, outputs[0]!],
        params: { layout: ARGMAX_PARAMS, values: { rows, loads: splits } },
        workgroups: rowGrid(encoder, rows, threads),
      });
      return;
    }
    const threads = threadsPerRow(loads, ARGMAX_LOADS_PER_THREAD);
    encoder.dispatch({
      shader: argmaxShader(threads, width, storage),
      buffers: [inputs[0]!, outputs[0]!],
      params: { layout: ARGMAX_PARAMS, values: { rows, loads } },
      workgroups: rowGrid(encoder, rows, threads),
    });
  },
  { dtypes: FLOAT },
);

/** Every shader of the family for rows of `n`, for tests. */
export function reductionShaders(n: number, scalar: Scalar = 'f32'): ShaderSource[] {
  const argmaxWidth = n % 4 === 0 ? 4 : 1;
  return [
    ...REDUCE_OPS.flatMap((op) => [
      rowReduceShader(op, threadsPerRow(n, ELEMENTS_PER_THREAD), op.name, scalar),
      splitReduceShader(op, op.name, scalar),
    ]),
    argmaxShader(threadsPerRow(n / argmaxWidth, ARGMAX_LOADS_PER_THREAD), argmaxWidth, scalar),
    argmaxShader(WG, argmaxWidth, scalar, true),
    argmaxPairsShader(
      threadsPerRow(rowSplits(1, n, n / argmaxWidth, ARGMAX_LOADS_PER_THREAD), ARGMAX_LOADS_PER_THREAD),
    ),
  ];
}

export const REDUCTION_KERNELS: readonly AnyWgpuKernel[] = [
  reduceKernel(sum, SUM_OP),
  reduceKernel(max, MAX_OP),
  reduceKernel(sumSquares, SUM_SQUARES_OP),
  argmaxKernel,
];
