import { argmax, type KernelSpec, max, pow2AtLeast, sizeOf, sum, sumSquares } from '@rayo/core';
import {
  type AnyWgpuKernel,
  gridFor,
  type KernelEncoder,
  linearWorkgroup,
  type Operand,
  storage,
  uniform,
  wgpuKernel,
} from '../kernel.js';
import { paramLayout } from '../params.js';
import { BUILTINS, WG } from './common.js';

// ---- shared by the row kernels (softmax uses them too) -------------------------

/**
 * Threads that share a row of `n` elements: about `perThread` elements each
 * (a whole workgroup for long rows, so that many short rows share one). Rows
 * of 32 or more get at least 8 threads, so that a warp's loads cover whole
 * 32-byte sectors; on an H100 fewer ran up to 1.7× slower there, while rows
 * of a few elements ran fastest with a thread or two each.
 */
export function threadsPerRow(n: number, perThread: number): number {
  return Math.min(WG, Math.max(n >= 32 ? 8 : 1, pow2AtLeast(Math.ceil(n / perThread))));
}

/** WGSL: -Infinity, built at run time (a constant infinity is a shader-creation error). */
export const NEG_INF = 'bitcast<f32>(neg_inf_bits)';
export const NEG_INF_DECL = 'var<private> neg_inf_bits: u32 = 0xff800000u;';

/**
 * WGSL: `fn <name>(lid: u32, v: T) -> T` (T is `type`), a tree reduction in workgroup
 * memory over each segment of `threads` consecutive invocations (a power of
 * two dividing the workgroup); every invocation gets its segment's result.
 * Call it from uniform control flow; it may be called again right away.
 */
export function segmentReduce(
  name: string,
  threads: number,
  combine: (a: string, b: string) => string,
  type = 'f32',
): string {
  const buf = `${name}_buf`;
  return `
var<workgroup> ${buf}: array<${type}, ${WG}>;
fn ${name}(lid: u32, v: ${type}) -> ${type} {
  ${buf}[lid] = v;
  for (var s = ${threads >> 1}u; s > 0u; s >>= 1u) {
    workgroupBarrier();
    if (lid % ${threads}u < s) { ${buf}[lid] = ${combine(`${buf}[lid]`, `${buf}[lid + s]`)}; }
  }
  workgroupBarrier();
  let r = ${buf}[lid - lid % ${threads}u];
  workgroupBarrier();
  return r;
}`;
}

// ---- reductions ----------------------------------------------------------------

interface ReduceOp {
  readonly name: string;
  /** WGSL of the element as it enters the reduction (`v` is the loaded value). */
  readonly load: string;
  readonly combine: (a: string, b: string) => string;
  /** WGSL identity of `combine`. */
  readonly identity: string;
  /** The op that reduces partial results of this one. */
  readonly partials: () => ReduceOp;
}

const SUM: ReduceOp = {
  name: 'sum',
  load: 'v',
  combine: (a, b) => `${a} + ${b}`,
  identity: '0.0',
  partials: () => SUM,
};
const MAX: ReduceOp = {
  name: 'max',
  load: 'v',
  combine: (a, b) => `max(${a}, ${b})`,
  identity: NEG_INF,
  partials: () => MAX,
};
const SUM_SQUARES: ReduceOp = {
  name: 'sumSquares',
  load: 'v * v',
  combine: (a, b) => `${a} + ${b}`,
  identity: '0.0',
  partials: () => SUM,
};

/** Independent accumulators per thread: loads in flight and shorter addition chains. */
const ACC = 4;
/** Elements per thread a row aims for (measured best on an H100 among 4, 8 and 16). */
const ELEMENTS_PER_THREAD = 8;

/** WGSL: accumulates elements `x[base + c]` for c = start, start + stride, … < end into `acc`. */
function stridedLoop(op: ReduceOp, start: string, stride: number | string, end: string): string {
  const step = typeof stride === 'number' ? `${stride}u` : stride;
  const accs = Array.from({ length: ACC }, (_, k) => `a${k}`);
  const at = (k: number) => (k === 0 ? 'c' : `c + ${k}u * ${step}`);
  const one = (k: number) => `{ let v = x[base + ${at(k)}]; ${accs[k]} = ${op.combine(accs[k]!, op.load)}; }`;
  return `
  ${accs.map((a) => `var ${a} = ${op.identity};`).join(' ')}
  var c = ${start};
  for (; c + ${ACC - 1}u * ${step} < ${end}; c += ${ACC}u * ${step}) {
    ${Array.from({ length: ACC }, (_, k) => one(k)).join('\n    ')}
  }
  for (; c < ${end}; c += ${step}) { ${one(0)} }
  let acc = ${op.combine(op.combine('a0', 'a1'), op.combine('a2', 'a3'))};`;
}

const ROW_PARAMS = paramLayout([
  ['rows', 'u32'],
  ['n', 'u32'],
] as const);

/** One row of `n` per segment of `threads` invocations; `WG / threads` rows per workgroup. */
function rowShader(op: ReduceOp, threads: number, kernel: string) {
  const rowsPerGroup = WG / threads;
  return {
    key: `reduction/rows/${op.name}/t${threads}/acc${ACC}/wg${WG}`,
    kernel,
    code: () => `
${ROW_PARAMS.wgsl}
${storage(0, 'x', 'f32', 'read')}
${storage(1, 'y', 'f32', 'read_write')}
${uniform(2)}
${NEG_INF_DECL}
${segmentReduce('reduce', threads, op.combine)}
@compute @workgroup_size(${WG})
fn main(${BUILTINS}) {
  let row = (${linearWorkgroup}) * ${rowsPerGroup}u + lid.x / ${threads}u;
  let lane = lid.x % ${threads}u;
  let base = row * params.n;
  // Rows past the end read nothing but still take part in the barriers.
  let end = select(0u, params.n, row < params.rows);
  ${stridedLoop(op, 'lane', threads, 'end')}
  let total = reduce(lid.x, acc);
  if (row < params.rows && lane == 0u) { y[row] = total; }
}`,
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
function splitShader(op: ReduceOp, kernel: string) {
  return {
    key: `reduction/split/${op.name}/acc${ACC}/wg${WG}`,
    kernel,
    code: () => `
${SPLIT_PARAMS.wgsl}
${storage(0, 'x', 'f32', 'read')}
${storage(1, 'partials', 'f32', 'read_write')}
${uniform(2)}
${NEG_INF_DECL}
${segmentReduce('reduce', WG, op.combine)}
@compute @workgroup_size(${WG})
fn main(${BUILTINS}) {
  let w = ${linearWorkgroup};
  let row = w / params.splits;
  let part = w % params.splits;
  let base = row * params.n;
  let end = select(0u, params.n, w < params.groups);
  ${stridedLoop(op, `part * ${WG}u + lid.x`, `params.splits * ${WG}u`, 'end')}
  let total = reduce(lid.x, acc);
  if (w < params.groups && lid.x == 0u) { partials[w] = total; }
}`,
  };
}

/** Rows at least this long are split over several workgroups when there are few rows. */
const SPLIT_MIN_LENGTH = 8192;
/** Elements per thread a split part aims for. */
const SPLIT_ELEMENTS_PER_THREAD = 8;
/** Enough workgroups to fill a large GPU a few times over. */
const SPLIT_TARGET_GROUPS = 1024;

/** Reduces `rows` runs of `n` consecutive elements of `x` into `y[row]`. */
function encodeRowReduce(
  encoder: KernelEncoder,
  op: ReduceOp,
  kernel: string,
  x: Operand | GPUBufferBinding,
  y: Operand | GPUBufferBinding,
  rows: number,
  n: number,
): void {
  if (rows === 0) return;
  const splits =
    n >= SPLIT_MIN_LENGTH
      ? Math.min(Math.ceil(n / (WG * SPLIT_ELEMENTS_PER_THREAD)), Math.ceil(SPLIT_TARGET_GROUPS / rows))
      : 1;
  if (splits > 1) {
    const groups = rows * splits;
    const partials: GPUBufferBinding = { buffer: encoder.scratch(groups * 4), offset: 0, size: groups * 4 };
    encoder.dispatch({
      shader: splitShader(op, kernel),
      buffers: [x, partials],
      params: { layout: SPLIT_PARAMS, values: { n, splits, groups } },
      workgroups: gridFor(groups, encoder.limits),
    });
    encodeRowReduce(encoder, op.partials(), kernel, partials, y, rows, splits);
    return;
  }
  const threads = threadsPerRow(n, ELEMENTS_PER_THREAD);
  encoder.dispatch({
    shader: rowShader(op, threads, kernel),
    buffers: [x, y],
    params: { layout: ROW_PARAMS, values: { rows, n } },
    workgroups: gridFor(Math.ceil(rows / (WG / threads)), encoder.limits),
  });
}

function reduceKernel(spec: KernelSpec<{ axis: 'last' | 'all' }>, op: ReduceOp): AnyWgpuKernel {
  return wgpuKernel(spec, (encoder, { inputs, outputs, attrs, io }) => {
    const x = inputs[0]!;
    const y = outputs[0]!;
    const shape = io.inputs[0]!.shape;
    const n = attrs.axis === 'all' ? sizeOf(shape) : shape[shape.length - 1]!;
    // An empty run reduces to the identity (0 for the sums; max rejects empty runs).
    encodeRowReduce(encoder, op, spec.name, x, y, y.size, n);
  });
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

const ARGMAX_WGSL = `
fn order_key(v: f32) -> u32 {
  let bits = bitcast<u32>(v);
  let mag = bits & 0x7fffffffu;
  if (mag > 0x7f800000u) { return 0xffffffffu; }
  if (mag == 0u) { return 0x80000000u; }
  return select(bits | 0x80000000u, ~bits, bits >= 0x80000000u);
}
fn better(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {
  return select(a, b, b.x > a.x || (b.x == a.x && b.y < a.y));
}`;

/**
 * One row per segment of `threads` invocations (a whole workgroup for long
 * rows); x is read as vec4 where `width` is 4. Each invocation scans its
 * loads in increasing index order, so a strictly larger key is the only one
 * that displaces its best; the tree then breaks ties by index.
 */
function argmaxShader(threads: number, width: 1 | 4) {
  const rowsPerGroup = WG / threads;
  const components = width === 4 ? ['x', 'y', 'z', 'w'] : [''];
  const absorb = (load: string) =>
    `{ let v = x[base + ${load}];${components
      .map(
        (c, i) =>
          ` { let k = order_key(v${c ? `.${c}` : ''}); if (k > best.x) { best = vec2<u32>(k, (${load}) * ${width}u + ${i}u); } }`,
      )
      .join('')} }`;
  const step = `${threads}u`;
  const at = (u: number) => (u === 0 ? 'j' : `j + ${u}u * ${step}`);
  return {
    key: `reduction/argmax/t${threads}/w${width}/u${ARGMAX_UNROLL}/wg${WG}`,
    kernel: 'argmax',
    code: () => `
${ARGMAX_PARAMS.wgsl}
${storage(0, 'x', width === 4 ? 'vec4<f32>' : 'f32', 'read')}
${storage(1, 'y', 'i32', 'read_write')}
${uniform(2)}
${ARGMAX_WGSL}
${segmentReduce('reduce', threads, (a, b) => `better(${a}, ${b})`, 'vec2<u32>')}
@compute @workgroup_size(${WG})
fn main(${BUILTINS}) {
  let row = (${linearWorkgroup}) * ${rowsPerGroup}u + lid.x / ${threads}u;
  let lane = lid.x % ${threads}u;
  let base = row * params.loads;
  // Rows past the end read nothing but still take part in the barriers.
  let end = select(0u, params.loads, row < params.rows);
  // Key 0 is no float's: every element displaces the start.
  var best = vec2<u32>(0u, 0xffffffffu);
  var j = lane;
  for (; ${at(ARGMAX_UNROLL - 1)} < end; j += ${ARGMAX_UNROLL}u * ${step}) {
    ${Array.from({ length: ARGMAX_UNROLL }, (_, u) => absorb(at(u))).join('\n    ')}
  }
  for (; j < end; j += ${step}) { ${absorb('j')} }
  let total = reduce(lid.x, best);
  if (row < params.rows && lane == 0u) { y[row] = i32(total.y); }
}`,
  };
}

/** Loads per invocation a row aims for before it takes more invocations. */
const ARGMAX_LOADS_PER_THREAD = 8;

const argmaxKernel = wgpuKernel(argmax, (encoder, { inputs, outputs, io }) => {
  const shape = io.inputs[0]!.shape;
  const n = shape[shape.length - 1]!;
  const rows = outputs[0]!.size;
  if (rows === 0) return;
  const width = n % 4 === 0 ? 4 : 1;
  const loads = n / width;
  const threads = threadsPerRow(loads, ARGMAX_LOADS_PER_THREAD);
  encoder.dispatch({
    shader: argmaxShader(threads, width),
    buffers: [inputs[0]!, outputs[0]!],
    params: { layout: ARGMAX_PARAMS, values: { rows, loads } },
    workgroups: gridFor(Math.ceil(rows / (WG / threads)), encoder.limits),
  });
});

export const REDUCTION_KERNELS: readonly AnyWgpuKernel[] = [
  reduceKernel(sum, SUM),
  reduceKernel(max, MAX),
  reduceKernel(sumSquares, SUM_SQUARES),
  argmaxKernel,
];
