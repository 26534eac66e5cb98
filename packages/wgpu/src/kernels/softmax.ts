import {
  type KernelSpec,
  logSoftmax,
  logSoftmaxBackward,
  type NoAttrs,
  pow2AtLeast,
  softmax,
  softmaxBackward,
} from '@rayo/core';
import { type AnyWgpuKernel, gridFor, linearWorkgroup, storage, uniform, wgpuKernel } from '../kernel.js';
import { paramLayout } from '../params.js';
import { BUILTINS, WG } from './common.js';
import { NEG_INF, NEG_INF_DECL, segmentReduce, threadsPerRow } from './reduction.js';

// Every kernel here runs one row of the last axis per segment of `threads`
// invocations (a whole workgroup for long rows, many short rows per
// workgroup), with the row statistics from tree reductions in workgroup
// memory. Rows of up to `WG · MAX_CACHED` elements are read once and kept in
// registers; longer rows are read twice, the first time for a running max and
// sum in one pass.

/**
 * Elements a thread keeps in registers at most (rows of up to WG · 32); on an
 * H100 rows of 8192 ran 1.3–1.45× faster cached than streamed.
 */
const MAX_CACHED = 32;
/** Elements per thread a row aims for: fewer threads per row, fewer reduction steps. */
const ELEMENTS_PER_THREAD = 8;
/** Loads in flight per thread in the streamed loops. */
const UNROLL = 4;

const PARAMS = paramLayout([
  ['rows', 'u32'],
  ['n', 'u32'],
] as const);

/**
 * Threads per row: short rows get about 4 elements per thread but at least
 * 4 threads (8 from 32 elements on, then about ELEMENTS_PER_THREAD each), so
 * that a warp's loads and stores cover whole 32-byte sectors; rows of 4 to 31
 * ran up to 3× slower on an H100 with fewer threads per row.
 */
function softmaxThreads(n: number): number {
  if (n < 4) return 1;
  if (n < 32) return Math.max(4, pow2AtLeast(Math.ceil(n / 4)));
  return threadsPerRow(n, ELEMENTS_PER_THREAD);
}

/** How a row of `n` is spread: `threads` per row, each caching `cached` elements (0: streamed). */
function planRow(n: number): { threads: number; cached: number } {
  const threads = softmaxThreads(n);
  const cached = pow2AtLeast(Math.ceil(n / threads));
  return cached <= MAX_CACHED ? { threads, cached } : { threads: WG, cached: 0 };
}

interface RowKernel {
  readonly spec: KernelSpec<NoAttrs>;
  /** Input names, in spec order; the output comes after them. */
  readonly inputs: readonly string[];
  readonly output: string;
  /** WGSL body for rows cached in registers `<input>_v[k]` (`k < K` elements, `valid(k)`, `out(k)`). */
  readonly cached: string;
  /**
   * WGSL for rows streamed from memory: statements, and loops over the
   * thread's columns `c` (`{ row }`) in which `at(name)` reads input `name`.
   */
  readonly streamed: readonly (string | { readonly row: string })[];
  /** Extra WGSL declarations (the reductions), for `threads` per row, cached or streamed. */
  readonly decls: (threads: number, cached: boolean) => string;
}

/**
 * A loop over the thread's columns of the row, `UNROLL` columns per step
 * with their loads issued first so that they are in flight together.
 */
function rowLoop(body: string, threads: number): string {
  const names = [...new Set([...body.matchAll(/\bat\((\w+)\)/g)].map((m) => m[1]!))];
  const step = (k: number) => (k === 0 ? 'cc' : `cc + ${k * threads}u`);
  const unrolled = Array.from({ length: UNROLL }, (_, k) => k);
  return `
  {
    var cc = lane;
    for (; cc + ${(UNROLL - 1) * threads}u < end; cc += ${UNROLL * threads}u) {
${unrolled.map((k) => names.map((name) => `      let ${name}_${k} = ${name}[base + ${step(k)}];`).join('\n')).join('\n')}
${unrolled.map((k) => `      { let c = ${step(k)}; ${body.replace(/\bat\((\w+)\)/g, `$1_${k}`)} }`).join('\n')}
    }
    for (; cc < end; cc += ${threads}u) { let c = cc; ${body.replace(/\bat\((\w+)\)/g, '$1[base + c]')} }
  }`;
}

function streamedBody(kernel: RowKernel, threads: number): string {
  return kernel.streamed
    .map((part) => (typeof part === 'string' ? part : rowLoop(part.row, threads)))
    .join('\n');
}

/** Loads the thread's `cached` elements of each input into registers, then runs the cached body. */
function cachedBody(kernel: RowKernel, threads: number, cached: number): string {
  const column = `lane + k * ${threads}u`;
  return `  const K = ${cached}u;
${kernel.inputs.map((name) => `  var ${name}_v: array<f32, ${cached}>;`).join('\n')}
  for (var k = 0u; k < K; k++) {
    if (${column} < end) {
${kernel.inputs.map((name) => `      ${name}_v[k] = ${name}[base + ${column}];`).join('\n')}
    }
  }
${kernel.cached.replaceAll('valid(k)', `${column} < end`).replaceAll('out(k)', `${kernel.output}[base + ${column}]`)}`;
}

function rowShader(kernel: RowKernel, threads: number, cached: number) {
  const rowsPerGroup = WG / threads;
  const variant = cached ? `cached${cached}` : `streamed/unroll${UNROLL}`;
  return {
    key: `softmax/${kernel.spec.name}/t${threads}/${variant}/wg${WG}`,
    kernel: kernel.spec.name,
    code: () => `
${PARAMS.wgsl}
${kernel.inputs.map((name, b) => storage(b, name, 'f32', 'read')).join('\n')}
${storage(kernel.inputs.length, kernel.output, 'f32', 'read_write')}
${uniform(kernel.inputs.length + 1)}
${NEG_INF_DECL}
${kernel.decls(threads, cached > 0)}
@compute @workgroup_size(${WG})
fn main(${BUILTINS}) {
  let row = (${linearWorkgroup}) * ${rowsPerGroup}u + lid.x / ${threads}u;
  let lane = lid.x % ${threads}u;
  let base = row * params.n;
  // Rows past the end touch no memory but still take part in the barriers.
  let end = select(0u, params.n, row < params.rows);
${cached ? cachedBody(kernel, threads, cached) : streamedBody(kernel, threads)}
}`,
  };
}

function rowKernel(kernel: RowKernel): AnyWgpuKernel {
  return wgpuKernel(kernel.spec, (encoder, { inputs, outputs }) => {
    const out = outputs[0]!;
    if (out.size === 0) return;
    const n = out.shape[out.shape.length - 1]!;
    const rows = out.size / n;
    const { threads, cached } = planRow(n);
    encoder.dispatch({
      shader: rowShader(kernel, threads, cached),
      buffers: [...inputs.map((t) => t!), out],
      params: { layout: PARAMS, values: { rows, n } },
      workgroups: gridFor(Math.ceil(rows / (WG / threads)), encoder.limits),
    });
  });
}

const sumDecl = (threads: number) => segmentReduce('reduce_sum', threads, (a, b) => `${a} + ${b}`);
const maxDecl = (threads: number) => segmentReduce('reduce_max', threads, (a, b) => `max(${a}, ${b})`);

/**
 * (max, Σ exp(x − max)) pairs: merging rescales both sums to the larger max.
 * An empty pair has a sum of 0.
 */
const ONLINE_MERGE = `
fn merge(a: vec2<f32>, b: vec2<f32>) -> vec2<f32> {
  if (b.y == 0.0) { return a; }
  if (a.y == 0.0) { return b; }
  let m = max(a.x, b.x);
  return vec2<f32>(m, a.y * exp(a.x - m) + b.y * exp(b.x - m));
}`;

const forwardDecls = (threads: number, cached: boolean) =>
  cached
    ? `${maxDecl(threads)}\n${sumDecl(threads)}`
    : `${ONLINE_MERGE}\n${segmentReduce('reduce_online', threads, (a, b) => `merge(${a}, ${b})`, 'vec2<f32>')}`;

/** Cached forward prologue: the row max `m`, then `s` = Σ exp(x − m) with `x_v` turned into exp(x − m) when `keepExp`. */
function cachedStats(keepExp: boolean): string {
  return `
  var m = ${NEG_INF};
  for (var k = 0u; k < K; k++) { if (valid(k)) { m = max(m, x_v[k]); } }
  m = reduce_max(lid.x, m);
  var s = 0.0;
  for (var k = 0u; k < K; k++) {
    if (valid(k)) { ${keepExp ? 'x_v[k] = exp(x_v[k] - m); s += x_v[k];' : 's += exp(x_v[k] - m);'} }
  }
  s = reduce_sum(lid.x, s);`;
}

const STREAMED_STATS = `
  var m = ${NEG_INF};
  var s = 0.0;`;
/**
 * Streamed forward statistics: one pass of running (max, sum) per thread,
 * where a larger element rescales the sum; -Infinity elements add nothing
 * until a finite max is known (and 0 afterwards).
 */
const STREAMED_ROW = `let v = at(x);
      if (v > m) { s = s * exp(m - v) + 1.0; m = v; } else if (m > ${NEG_INF}) { s += exp(v - m); }`;
const STREAMED_MERGE = '  let stats = reduce_online(lid.x, vec2<f32>(m, s));';

const SOFTMAX: RowKernel = {
  spec: softmax,
  inputs: ['x'],
  output: 'y',
  decls: forwardDecls,
  cached: `${cachedStats(true)}
  let inv = 1.0 / s;
  for (var k = 0u; k < K; k++) { if (valid(k)) { out(k) = x_v[k] * inv; } }`,
  streamed: [
    STREAMED_STATS,
    { row: STREAMED_ROW },
    STREAMED_MERGE,
    '  let inv = 1.0 / stats.y;',
    { row: 'y[base + c] = exp(at(x) - stats.x) * inv;' },
  ],
};

const LOG_SOFTMAX: RowKernel = {
  spec: logSoftmax,
  inputs: ['x'],
  output: 'y',
  decls: forwardDecls,
  cached: `${cachedStats(false)}
  let logSum = log(s);
  for (var k = 0u; k < K; k++) { if (valid(k)) { out(k) = (x_v[k] - m) - logSum; } }`,
  streamed: [
    STREAMED_STATS,
    { row: STREAMED_ROW },
    STREAMED_MERGE,
    '  let logSum = log(stats.y);',
    { row: 'y[base + c] = (at(x) - stats.x) - logSum;' },
  ],
};

const SOFTMAX_BACKWARD: RowKernel = {
  spec: softmaxBackward,
  inputs: ['dy', 'y'],
  output: 'dx',
  decls: sumDecl,
  cached: `
  var dot = 0.0;
  for (var k = 0u; k < K; k++) { if (valid(k)) { dot += dy_v[k] * y_v[k]; } }
  dot = reduce_sum(lid.x, dot);
  for (var k = 0u; k < K; k++) { if (valid(k)) { out(k) = y_v[k] * (dy_v[k] - dot); } }`,
  streamed: [
    '  var dot = 0.0;',
    { row: 'dot += at(dy) * at(y);' },
    '  dot = reduce_sum(lid.x, dot);',
    { row: 'dx[base + c] = at(y) * (at(dy) - dot);' },
  ],
};

const LOG_SOFTMAX_BACKWARD: RowKernel = {
  spec: logSoftmaxBackward,
  inputs: ['dy', 'y'],
  output: 'dx',
  decls: sumDecl,
  cached: `
  var total = 0.0;
  for (var k = 0u; k < K; k++) { if (valid(k)) { total += dy_v[k]; } }
  total = reduce_sum(lid.x, total);
  for (var k = 0u; k < K; k++) { if (valid(k)) { out(k) = dy_v[k] - exp(y_v[k]) * total; } }`,
  streamed: [
    '  var total = 0.0;',
    { row: 'total += at(dy);' },
    '  total = reduce_sum(lid.x, total);',
    { row: 'dx[base + c] = at(dy) - exp(at(y)) * total;' },
  ],
};

export const SOFTMAX_KERNELS: readonly AnyWgpuKernel[] = [
  rowKernel(SOFTMAX),
  rowKernel(LOG_SOFTMAX),
  rowKernel(SOFTMAX_BACKWARD),
  rowKernel(LOG_SOFTMAX_BACKWARD),
];
