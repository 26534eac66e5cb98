import {
  FLOAT,
  isHalf,
  type KernelSpec,
  logSoftmax,
  logSoftmaxBackward,
  type NoAttrs,
  softmax,
  softmaxBackward,
} from '@rayo/core';
import { type AnyWgpuKernel, wgpuKernel } from '../kernel.js';
import { paramLayout } from '../params.js';
import type { ShaderSource } from '../pipelines.js';
import { narrow, type Scalar, ShaderModule } from '../wgsl/module.js';
import {
  type At,
  type CachedRowPlan,
  declareNegInf,
  declareRowInput,
  MAX,
  NEG_INF,
  onlineMerge,
  planCachedRow,
  type RowInput,
  rowGrid,
  rowInputKey,
  rowInputLoad,
  rowInputType,
  rowPrologue,
  SUM,
  segmentReduce,
  UNROLL,
  unrolledRowLoop,
} from '../wgsl/rowReduce.js';
import { WG } from './common.js';
import { encodeWithF32Activations } from './halfEdges.js';

// Every kernel here runs one row of the last axis per segment of threads
// (see `planCachedRow`), with the row statistics from tree reductions in
// workgroup memory. Rows of up to `WG · MAX_CACHED` elements are read once
// and kept in registers; longer rows are read twice, the first time for a
// running max and sum in one pass.

const PARAMS = paramLayout([
  ['rows', 'u32'],
  ['n', 'u32'],
] as const);

/** A row cached in registers: `at(input)` is its element `k` (valid when `valid`), `store(v)` writes it. */
interface CachedRow {
  readonly at: At;
  readonly valid: string;
  readonly store: (value: string) => string;
}

/** A streamed row: `loop(body)` walks the thread's columns, `store(v)` writes column `c`. */
interface StreamedRow {
  readonly loop: (body: (at: At) => string) => string;
  readonly store: (value: string) => string;
}

export interface RowKernel {
  readonly spec: KernelSpec<NoAttrs>;
  /** Input names, in spec order; the output comes after them. */
  readonly inputs: readonly string[];
  readonly output: string;
  /** Declares the row reductions the bodies call. */
  readonly declare: (module: ShaderModule, threads: number, cached: boolean) => void;
  /** WGSL for rows cached in registers (`k < K`). */
  readonly cached: (row: CachedRow) => string;
  /** WGSL for rows streamed from memory. */
  readonly streamed: (row: StreamedRow) => string;
}

/** Loads the thread's `cached` elements of each input into registers, then runs the cached body. */
/** The stored type of the output: the input's scalar, or f32 for inputs in words (rounded after). */
const outputOf = (x: RowInput): Scalar => (typeof x === 'string' ? x : 'f32');

function cachedBody(kernel: RowKernel, scalar: RowInput, { threads, cached }: CachedRowPlan): string {
  const column = `lane + k * ${threads}u`;
  return `  const K = ${cached}u;
${kernel.inputs.map((name) => `  var ${name}_v: array<f32, ${cached}>;`).join('\n')}
  for (var k = 0u; k < K; k++) {
    if (${column} < end) {
${kernel.inputs.map((name) => `      ${name}_v[k] = ${rowInputLoad(scalar, name, `base + ${column}`)};`).join('\n')}
    }
  }
${kernel.cached({
  at: (name) => `${name}_v[k]`,
  valid: `${column} < end`,
  store: (value) => `${kernel.output}[base + ${column}] = ${narrow(outputOf(scalar), 1, value)};`,
})}`;
}

function streamedBody(kernel: RowKernel, scalar: RowInput, threads: number): string {
  return kernel.streamed({
    loop: (body) => unrolledRowLoop(threads, body, (name, index) => rowInputLoad(scalar, name, index)),
    store: (value) => `${kernel.output}[base + c] = ${narrow(outputOf(scalar), 1, value)};`,
  });
}

export function softmaxShader(
  kernel: RowKernel,
  plan: CachedRowPlan,
  scalar: RowInput = 'f32',
): ShaderSource {
  const variant = plan.cached ? `cached${plan.cached}` : `streamed/unroll${UNROLL}`;
  return {
    key: `softmax/${kernel.spec.name}/${rowInputKey(scalar)}/t${plan.threads}/${variant}/wg${WG}`,
    kernel: kernel.spec.name,
    code: () => {
      const module = new ShaderModule();
      for (const name of kernel.inputs) module.storage(name, rowInputType(scalar), 'read');
      module.storage(kernel.output, outputOf(scalar), 'read_write');
      declareRowInput(module, scalar);
      declareNegInf(module);
      kernel.declare(module, plan.threads, plan.cached > 0);
      const body = plan.cached
        ? cachedBody(kernel, scalar, plan)
        : streamedBody(kernel, scalar, plan.threads);
      return module.build(PARAMS, WG, `${rowPrologue(plan.threads, 'params.n')}\n${body}`);
    },
  };
}

/** Half rows are read in u32 words; a half output is computed in f32 scratch and rounded once. */
function rowKernel(kernel: RowKernel): AnyWgpuKernel {
  return wgpuKernel(
    kernel.spec,
    (encoder, { inputs, outputs }) => {
      const out = outputs[0]!;
      if (out.size === 0) return;
      const n = out.shape[out.shape.length - 1]!;
      const rows = out.size / n;
      const plan = planCachedRow(n);
      const dtype = inputs[0]!.dtype;
      const input: RowInput = isHalf(dtype) ? { words: dtype } : 'f32';
      encodeWithF32Activations(encoder, kernel.spec.name, {}, { out }, (_, o) => {
        encoder.dispatch({
          shader: softmaxShader(kernel, plan, input),
          buffers: [...inputs.map((t) => t!), o.out!],
          params: { layout: PARAMS, values: { rows, n } },
          workgroups: rowGrid(encoder, rows, plan.threads),
        });
      });
    },
    { dtypes: FLOAT },
  );
}

const declareSum = (module: ShaderModule, threads: number) => {
  segmentReduce(module, 'reduce_sum', threads, SUM);
};

/** Cached rows take the max, then the sum; streamed ones a running (max, sum) merged at once. */
const declareForward = (module: ShaderModule, threads: number, cached: boolean) => {
  if (cached) {
    segmentReduce(module, 'reduce_max', threads, MAX);
    declareSum(module, threads);
  } else {
    segmentReduce(module, 'reduce_online', threads, onlineMerge(module), 'vec2<f32>');
  }
};

/** Cached forward prologue: the row max `m`, then `s` = Σ exp(x − m) with `x_v` turned into exp(x − m) when `keepExp`. */
function cachedStats({ at, valid }: CachedRow, keepExp: boolean): string {
  const x = at('x');
  return `
  var m = ${NEG_INF};
  for (var k = 0u; k < K; k++) { if (${valid}) { m = max(m, ${x}); } }
  m = reduce_max(lid.x, m);
  var s = 0.0;
  for (var k = 0u; k < K; k++) {
    if (${valid}) { ${keepExp ? `${x} = exp(${x} - m); s += ${x};` : `s += exp(${x} - m);`} }
  }
  s = reduce_sum(lid.x, s);`;
}

/**
 * Streamed forward statistics `stats` = (max, Σ exp(x − max)): one pass of
 * running (max, sum) per thread, where a larger element rescales the sum;
 * -Infinity elements add nothing until a finite max is known (and 0 afterwards).
 */
function streamedStats({ loop }: StreamedRow): string {
  return `
  var m = ${NEG_INF};
  var s = 0.0;
${loop(
  (at) => `let v = ${at('x')};
      if (v > m) { s = s * exp(m - v) + 1.0; m = v; } else if (m > ${NEG_INF}) { s += exp(v - m); }`,
)}
  let stats = reduce_online(lid.x, vec2<f32>(m, s));`;
}

/** `for each valid cached k { store(value) }` */
const storeCached = ({ valid, store }: CachedRow, value: string) =>
  `  for (var k = 0u; k < K; k++) { if (${valid}) { ${store(value)} } }`;

const SOFTMAX: RowKernel = {
  spec: softmax,
  inputs: ['x'],
  output: 'y',
  declare: declareForward,
  cached: (row) => `${cachedStats(row, true)}
  let inv = 1.0 / s;
${storeCached(row, `${row.at('x')} * inv`)}`,
  streamed: (row) => `${streamedStats(row)}
  let inv = 1.0 / stats.y;
${row.loop((at) => row.store(`exp(${at('x')} - stats.x) * inv`))}`,
};

const LOG_SOFTMAX: RowKernel = {
  spec: logSoftmax,
  inputs: ['x'],
  output: 'y',
  declare: declareForward,
  cached: (row) => `${cachedStats(row, false)}
  let logSum = log(s);
${storeCached(row, `(${row.at('x')} - m) - logSum`)}`,
  streamed: (row) => `${streamedStats(row)}
  let logSum = log(stats.y);
${row.loop((at) => row.store(`(${at('x')} - stats.x) - logSum`))}`,
};

/**
 * The backward kernels: a row sum `total` of `term`, then `grad` per element
 * (`at` reads the row's dy and y).
 */
function backwardKernel(
  spec: KernelSpec<NoAttrs>,
  term: (at: At) => string,
  grad: (at: At) => string,
): RowKernel {
  return {
    spec,
    inputs: ['dy', 'y'],
    output: 'dx',
    declare: declareSum,
    cached: (row) => `
  var total = 0.0;
  for (var k = 0u; k < K; k++) { if (${row.valid}) { total += ${term(row.at)}; } }
  total = reduce_sum(lid.x, total);
${storeCached(row, grad(row.at))}`,
    streamed: (row) => `
  var total = 0.0;
${row.loop((at) => `total += ${term(at)};`)}
  total = reduce_sum(lid.x, total);
${row.loop((at) => row.store(grad(at)))}`,
  };
}

export const SOFTMAX_ROW_KERNELS: readonly RowKernel[] = [
  SOFTMAX,
  LOG_SOFTMAX,
  // dx = y · (dy − Σ dy · y)
  backwardKernel(
    softmaxBackward,
    (at) => `${at('dy')} * ${at('y')}`,
    (at) => `${at('y')} * (${at('dy')} - total)`,
  ),
  // dx = dy − exp(y) · Σ dy
  backwardKernel(
    logSoftmaxBackward,
    (at) => at('dy'),
    (at) => `${at('dy')} - exp(${at('y')}) * total`,
  ),
];

/** Every shader of the family for rows of `n`, for tests. */
export function softmaxShaders(n: number, scalar: Scalar = 'f32'): ShaderSource[] {
  return SOFTMAX_ROW_KERNELS.map((kernel) => softmaxShader(kernel, planCachedRow(n), scalar));
}

export const SOFTMAX_KERNELS: readonly AnyWgpuKernel[] = SOFTMAX_ROW_KERNELS.map(rowKernel);
