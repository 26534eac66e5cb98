import { pow2AtLeast } from '@rayo/core';
import { gridFor, type KernelEncoder } from '../kernel.js';
import { WG } from '../kernels/common.js';
import { halfFunctions, loadScalar } from './half.js';
import { linearWorkgroup, type Scalar, type ShaderModule, type WgslType, widen } from './module.js';

// Building blocks of the kernels that reduce along rows of the last axis
// (reductions, softmax, normalization, loss): a segment of `threads`
// consecutive invocations per row (a whole workgroup for long rows, many
// short rows per workgroup), row statistics from tree reductions in
// workgroup memory, and the loops that walk a thread's columns. Every
// invocation of a segment gets the same result, so every one can use it.

// ---- planning ------------------------------------------------------------------

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

/**
 * Elements a thread keeps in registers at most (rows of up to WG · 32); on an
 * H100 rows of 8192 ran 1.3–1.45× faster cached than streamed.
 */
export const MAX_CACHED = 32;
/** Elements per thread a cached row aims for: fewer threads per row, fewer reduction steps. */
const CACHED_ELEMENTS_PER_THREAD = 8;

/**
 * Threads per row of a kernel that caches its row: short rows get about 4
 * elements per thread but at least 4 threads (8 from 32 elements on, then
 * about CACHED_ELEMENTS_PER_THREAD each), so that a warp's loads and stores
 * cover whole 32-byte sectors; rows of 4 to 31 ran up to 3× slower on an
 * H100 with fewer threads per row.
 */
export function cachedRowThreads(n: number): number {
  if (n < 4) return 1;
  if (n < 32) return Math.max(4, pow2AtLeast(Math.ceil(n / 4)));
  return threadsPerRow(n, CACHED_ELEMENTS_PER_THREAD);
}

/** How a row of `n` is spread: `threads` per row, each caching `cached` elements (0: streamed). */
export interface CachedRowPlan {
  readonly threads: number;
  readonly cached: number;
}

/** Rows of up to `WG · MAX_CACHED` are read once into registers; longer rows are streamed by a whole workgroup. */
export function planCachedRow(n: number): CachedRowPlan {
  const threads = cachedRowThreads(n);
  const cached = pow2AtLeast(Math.ceil(n / threads));
  return cached <= MAX_CACHED ? { threads, cached } : { threads: WG, cached: 0 };
}

/** A row read with vec4 loads where its length allows, one load per thread and step. */
export interface VectorRowPlan {
  /** Elements per load: 4 when the row length is a multiple of 4. */
  readonly vec: 1 | 4;
  /** Row length in loads. */
  readonly loads: number;
  /** Invocations per row, a power of two dividing WG: one per load up to a workgroup. */
  readonly threads: number;
}

export function planVectorRow(n: number): VectorRowPlan {
  const vec = n % 4 === 0 ? 4 : 1;
  const loads = n / vec;
  return { vec, loads, threads: Math.min(WG, pow2AtLeast(loads)) };
}

/** Workgroups for `rows` rows of `threads` invocations each, on a `gridFor` grid. */
export function rowGrid(
  encoder: Pick<KernelEncoder, 'limits'>,
  rows: number,
  threads: number,
): [number, number] {
  return gridFor(Math.ceil(rows / (WG / threads)), encoder.limits);
}

// ---- WGSL: constants and reductions ----------------------------------------------

/** WGSL: -Infinity, built at run time (a constant infinity is a shader-creation error). */
export const NEG_INF = 'bitcast<f32>(neg_inf_bits)';
/** Declares what `NEG_INF` reads. */
export function declareNegInf(module: ShaderModule): void {
  module.declare('var<private> neg_inf_bits: u32 = 0xff800000u;');
}

export type Combine = (a: string, b: string) => string;
export const SUM: Combine = (a, b) => `${a} + ${b}`;
export const MAX: Combine = (a, b) => `max(${a}, ${b})`;

/**
 * Declares `fn <name>(lid: u32, v: T) -> T`, a tree reduction in workgroup
 * memory over each segment of `threads` consecutive invocations (a power of
 * two dividing the workgroup); every invocation gets its segment's result.
 * Call it from uniform control flow; it may be called again right away.
 * Returns `name`.
 */
export function segmentReduce(
  module: ShaderModule,
  name: string,
  threads: number,
  combine: Combine,
  type: WgslType = 'f32',
): string {
  const buf = module.workgroupArray(`${name}_buf`, type, WG);
  module.declare(`fn ${name}(lid: u32, v: ${type}) -> ${type} {
  ${buf}[lid] = v;
  for (var s = ${threads >> 1}u; s > 0u; s >>= 1u) {
    workgroupBarrier();
    if (lid % ${threads}u < s) { ${buf}[lid] = ${combine(`${buf}[lid]`, `${buf}[lid + s]`)}; }
  }
  workgroupBarrier();
  let r = ${buf}[lid - lid % ${threads}u];
  workgroupBarrier();
  return r;
}`);
  return name;
}

/**
 * Declares `fn merge_online(a, b: vec2<f32>) -> vec2<f32>` over (max, Σ exp(x − max))
 * pairs: merging rescales both sums to the larger max; an empty pair (sum 0)
 * leaves the other as it is. Returns a `Combine` that calls it.
 */
export function onlineMerge(module: ShaderModule): Combine {
  module.declare(`fn merge_online(a: vec2<f32>, b: vec2<f32>) -> vec2<f32> {
  if (b.y == 0.0) { return a; }
  if (a.y == 0.0) { return b; }
  let m = max(a.x, b.x);
  return vec2<f32>(m, a.y * exp(a.x - m) + b.y * exp(b.x - m));
}`);
  return (a, b) => `merge_online(${a}, ${b})`;
}

// ---- WGSL: row structure -------------------------------------------------------

/**
 * WGSL: the start of a row kernel: `row`, the invocation's `lane` in it,
 * `base` (its first element) and `end` (its `length`, 0 for rows past the
 * last, which read nothing but still take part in the barriers).
 */
export function rowPrologue(threads: number, length: string): string {
  return `  let row = (${linearWorkgroup}) * ${WG / threads}u + lid.x / ${threads}u;
  let lane = lid.x % ${threads}u;
  let base = row * ${length};
  let end = select(0u, ${length}, row < params.rows);`;
}

/** WGSL: `body` for each of the thread's columns `j` of the row, one at a time. */
export function columnLoop(threads: number, body: string): string {
  return `for (var j = lane; j < end; j += ${threads}u) { ${body} }`;
}

/** Loads in flight per thread in the streamed loops. */
export const UNROLL = 4;

/** Reads input `name` at the current column, as f32. */
export type At = (name: string) => string;

/**
 * WGSL: a loop over the thread's columns `c` of the row, `UNROLL` columns
 * per step with their loads issued first so that they are in flight
 * together, then the rest one at a time. `body` gets `at(name)` for the
 * element of input `name` at `c`; `load(name, index)` reads element `index`
 * of input `name` as f32.
 */
export function unrolledRowLoop(
  threads: number,
  body: (at: At) => string,
  load: (name: string, index: string) => string,
): string {
  const read = new Set<string>();
  body((name) => {
    read.add(name);
    return '';
  });
  const names = [...read];
  const step = (k: number) => (k === 0 ? 'cc' : `cc + ${k * threads}u`);
  const unrolled = Array.from({ length: UNROLL }, (_, k) => k);
  return `
  {
    var cc = lane;
    for (; cc + ${(UNROLL - 1) * threads}u < end; cc += ${UNROLL * threads}u) {
${unrolled.map((k) => names.map((name) => `      let ${name}_${k} = ${load(name, `base + ${step(k)}`)};`).join('\n')).join('\n')}
${unrolled.map((k) => `      { let c = ${step(k)}; ${body((name) => `${name}_${k}`)} }`).join('\n')}
    }
    for (; cc < end; cc += ${threads}u) { let c = cc; ${body((name) => load(name, 'base + c'))} }
  }`;
}

/** Independent accumulators per thread: loads in flight and shorter combine chains. */
export const ACCUMULATORS = 4;

/**
 * WGSL: combines `element(load(base + c))` (load: the f32 of x at an index)
 * for c = start, start + stride, … < end into `let acc`, over `ACCUMULATORS`
 * independent accumulators.
 */
export function stridedAccumulate(
  combine: Combine,
  identity: string,
  element: (v: string) => string,
  start: string,
  stride: number | string,
  load: (index: string) => string,
): string {
  const step = typeof stride === 'number' ? `${stride}u` : stride;
  const accs = Array.from({ length: ACCUMULATORS }, (_, k) => `a${k}`);
  const at = (k: number) => (k === 0 ? 'c' : `c + ${k}u * ${step}`);
  const one = (k: number) =>
    `{ let v = ${load(`base + ${at(k)}`)}; ${accs[k]} = ${combine(accs[k]!, element('v'))}; }`;
  return `
  ${accs.map((a) => `var ${a} = ${identity};`).join(' ')}
  var c = ${start};
  for (; c + ${ACCUMULATORS - 1}u * ${step} < end; c += ${ACCUMULATORS}u * ${step}) {
    ${accs.map((_, k) => one(k)).join('\n    ')}
  }
  for (; c < end; c += ${step}) { ${one(0)} }
  let acc = ${pairwise(combine, accs)};`;
}

/** WGSL: `terms` combined as a balanced tree. */
function pairwise(combine: Combine, terms: readonly string[]): string {
  if (terms.length === 1) return terms[0]!;
  const half = terms.length >> 1;
  return combine(pairwise(combine, terms.slice(0, half)), pairwise(combine, terms.slice(half)));
}

/**
 * How a row kernel reads its inputs: a WGSL scalar (`f16` natively, with
 * `shader-f16`), or halves in u32 words (`{ words }`, on every adapter: what
 * the kernels run; their outputs are then f32, rounded by the caller).
 */
export type RowInput = Scalar | { readonly words: 'f16' | 'bf16' };

/** Pipeline-key part of a row input. */
export function rowInputKey(x: RowInput): string {
  return typeof x === 'string' ? x : `words-${x.words}`;
}

/** The element type of a row input's binding. */
export function rowInputType(x: RowInput): Scalar | 'u32' {
  return typeof x === 'string' ? x : 'u32';
}

/** WGSL: element `index` of input binding `name` as f32. */
export function rowInputLoad(x: RowInput, name: string, index: string): string {
  return typeof x === 'string' ? widen(x, 1, `${name}[${index}]`) : loadScalar(x.words, name, index);
}

/** Declares what reading a row input needs in `module`. */
export function declareRowInput(module: ShaderModule, x: RowInput): void {
  if (typeof x !== 'string') module.declare(halfFunctions(x.words));
}
