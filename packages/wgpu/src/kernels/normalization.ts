import { layerNorm, layerNormBackward, pow2AtLeast, rmsNorm, rmsNormBackward } from '@rayo/core';
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

// Row kernels: `threads` invocations per row of the last axis (a whole
// workgroup for long rows, many short rows per workgroup), statistics from
// tree reductions in workgroup memory, vec4 loads when the row length allows.
// The backward kernels' per-feature gradients are column sums over rows: the
// row kernel stores each row's statistics, a column pass sums blocks of rows
// into partials and a last pass adds the partials in a fixed order, so every
// result is deterministic.

const ROW_PARAMS = paramLayout([
  ['rows', 'u32'],
  ['nv', 'u32'],
  ['n', 'f32'],
  ['eps', 'f32'],
] as const);

interface RowPlan {
  /** Elements per load: 4 when the row length is a multiple of 4. */
  readonly vec: 1 | 4;
  /** Row length in loads. */
  readonly nv: number;
  /** Invocations per row, a power of two dividing WG. */
  readonly threads: number;
}

function planRow(n: number): RowPlan {
  const vec = n % 4 === 0 ? 4 : 1;
  const nv = n / vec;
  const threads = Math.min(WG, pow2AtLeast(nv));
  return { vec, nv, threads };
}

const vtype = (vec: number) => (vec === 4 ? 'vec4<f32>' : 'f32');
/** WGSL: the sum of the lanes of `e`. */
const hsum = (vec: number, e: string) => (vec === 4 ? `dot(${e}, vec4<f32>(1.0))` : `(${e})`);
/** WGSL: the sum of squares of the lanes of `e`. */
const sumSq = (vec: number, e: string) => (vec === 4 ? `dot(${e}, ${e})` : `(${e}) * (${e})`);

/**
 * WGSL: `name(v)` sums `v` over the `threads` invocations of each row segment
 * of the workgroup (a tree in workgroup memory); every invocation gets its
 * row's sum. Call from uniform control flow.
 */
function segmentSum(name: string, type: string, threads: number): string {
  const loop =
    threads > 1
      ? `  for (var s = ${threads / 2}u; s > 0u; s >>= 1u) {
    if (lane < s) { ${name}_buf[t] = ${name}_buf[t] + ${name}_buf[t + s]; }
    workgroupBarrier();
  }`
      : '';
  return `
var<workgroup> ${name}_buf: array<${type}, ${WG}>;
fn ${name}(v: ${type}, t: u32) -> ${type} {
  let lane = t % ${threads}u;
  workgroupBarrier();
  ${name}_buf[t] = v;
  workgroupBarrier();
${loop}
  return ${name}_buf[t - lane];
}`;
}

/** WGSL: the prologue of a row kernel: `row`, `t`, `lane`, `base` and `end` (0 for rows past the last). */
function rowPrologue(plan: RowPlan): string {
  return `  let t = lid.x;
  let row = (${linearWorkgroup}) * ${WG / plan.threads}u + t / ${plan.threads}u;
  let lane = t % ${plan.threads}u;
  let end = select(0u, params.nv, row < params.rows);
  let base = row * params.nv;`;
}

const forRow = (plan: RowPlan) => `for (var j = lane; j < end; j += ${plan.threads}u)`;

function rowGrid(encoder: KernelEncoder, rows: number, plan: RowPlan): [number, number] {
  return gridFor(Math.ceil(rows / (WG / plan.threads)), encoder.limits);
}

function rowKey(name: string, plan: RowPlan): string {
  return `normalization/${name}/t${plan.threads}/v${plan.vec}/wg${WG}`;
}

/**
 * WGSL: the row's mean as `mean + m.x` (a rounded first-pass mean and its
 * correction, so rows far from zero keep the digits of x − mean) and its
 * biased variance `m.y`, from two passes: E[x²] − E[x]² would cancel.
 */
function rowMoments(plan: RowPlan): string {
  return `  var acc = 0.0;
  ${forRow(plan)} { acc += ${hsum(plan.vec, 'x[base + j]')}; }
  let mean = rowSum(acc, t) / params.n;
  var dev = vec2<f32>(0.0);
  ${forRow(plan)} { let d = x[base + j] - mean; dev += vec2<f32>(${hsum(plan.vec, 'd')}, ${sumSq(plan.vec, 'd')}); }
  let r = rowSum2(dev, t) / params.n;
  let m = vec2<f32>(r.x, max(r.y - r.x * r.x, 0.0));`;
}

// ---- forward -----------------------------------------------------------------

function rmsNormShader(plan: RowPlan) {
  const V = vtype(plan.vec);
  return {
    key: rowKey('rmsNorm', plan),
    kernel: 'rmsNorm',
    code: () => `
${ROW_PARAMS.wgsl}
${storage(0, 'x', V, 'read')}
${storage(1, 'w', V, 'read')}
${storage(2, 'y', V, 'read_write')}
${uniform(3)}
${segmentSum('rowSum', 'f32', plan.threads)}
@compute @workgroup_size(${WG})
fn main(${BUILTINS}) {
${rowPrologue(plan)}
  var acc = 0.0;
  ${forRow(plan)} { let v = x[base + j]; acc += ${sumSq(plan.vec, 'v')}; }
  let s = inverseSqrt(rowSum(acc, t) / params.n + params.eps);
  ${forRow(plan)} { y[base + j] = x[base + j] * s * w[j]; }
}`,
  };
}

function layerNormShader(plan: RowPlan) {
  const V = vtype(plan.vec);
  return {
    key: rowKey('layerNorm', plan),
    kernel: 'layerNorm',
    code: () => `
${ROW_PARAMS.wgsl}
${storage(0, 'x', V, 'read')}
${storage(1, 'g', V, 'read')}
${storage(2, 'b', V, 'read')}
${storage(3, 'y', V, 'read_write')}
${uniform(4)}
${segmentSum('rowSum', 'f32', plan.threads)}
${segmentSum('rowSum2', 'vec2<f32>', plan.threads)}
@compute @workgroup_size(${WG})
fn main(${BUILTINS}) {
${rowPrologue(plan)}
${rowMoments(plan)}
  let scale = inverseSqrt(m.y + params.eps);
  ${forRow(plan)} { y[base + j] = (x[base + j] - mean - m.x) * scale * g[j] + b[j]; }
}`,
  };
}

function rowCall(x: Operand, eps: number) {
  const n = x.shape[x.shape.length - 1]!;
  const rows = n === 0 ? 0 : x.size / n;
  const plan = planRow(n);
  return { n, rows, plan, values: { rows, nv: plan.nv, n, eps } };
}

// ---- backward ----------------------------------------------------------------

function rmsNormBackwardShader(plan: RowPlan) {
  const V = vtype(plan.vec);
  return {
    key: rowKey('rmsNormBackward', plan),
    kernel: 'rmsNormBackward',
    code: () => `
${ROW_PARAMS.wgsl}
${storage(0, 'dy', V, 'read')}
${storage(1, 'x', V, 'read')}
${storage(2, 'w', V, 'read')}
${storage(3, 'dx', V, 'read_write')}
${storage(4, 'stats', 'f32', 'read_write')}
${uniform(5)}
${segmentSum('rowSum', 'vec2<f32>', plan.threads)}
@compute @workgroup_size(${WG})
fn main(${BUILTINS}) {
${rowPrologue(plan)}
  var acc = vec2<f32>(0.0);
  ${forRow(plan)} {
    let xv = x[base + j];
    let gv = dy[base + j] * w[j];
    acc += vec2<f32>(${sumSq(plan.vec, 'xv')}, ${hsum(plan.vec, 'gv * xv')});
  }
  let r = rowSum(acc, t);
  let s = inverseSqrt(r.x / params.n + params.eps);
  // dx = s · dy · w − s³ · x · Σ(dy · w · x) / n
  let c = s * s * s * r.y / params.n;
  ${forRow(plan)} { dx[base + j] = s * dy[base + j] * w[j] - c * x[base + j]; }
  if (lane == 0u && row < params.rows) { stats[row] = s; }
}`,
  };
}

function layerNormBackwardShader(plan: RowPlan) {
  const V = vtype(plan.vec);
  return {
    key: rowKey('layerNormBackward', plan),
    kernel: 'layerNormBackward',
    code: () => `
${ROW_PARAMS.wgsl}
${storage(0, 'dy', V, 'read')}
${storage(1, 'x', V, 'read')}
${storage(2, 'gamma', V, 'read')}
${storage(3, 'dx', V, 'read_write')}
${storage(4, 'stats', 'vec4<f32>', 'read_write')}
${uniform(5)}
${segmentSum('rowSum', 'f32', plan.threads)}
${segmentSum('rowSum3', 'vec4<f32>', plan.threads)}
@compute @workgroup_size(${WG})
fn main(${BUILTINS}) {
${rowPrologue(plan)}
  var acc = 0.0;
  ${forRow(plan)} { acc += ${hsum(plan.vec, 'x[base + j]')}; }
  let mean = rowSum(acc, t) / params.n;
  // Σd, Σd², Σg and Σg·d with d = x − mean, g = dy · gamma, in one pass; Σd
  // corrects the rounded mean (see rowMoments).
  var acc4 = vec4<f32>(0.0);
  ${forRow(plan)} {
    let d = x[base + j] - mean;
    let gv = dy[base + j] * gamma[j];
    acc4 += vec4<f32>(${hsum(plan.vec, 'd')}, ${sumSq(plan.vec, 'd')}, ${hsum(plan.vec, 'gv')}, ${hsum(plan.vec, 'gv * d')});
  }
  let r = rowSum3(acc4, t) / params.n;
  let c = r.x;
  let scale = inverseSqrt(max(r.y - c * c, 0.0) + params.eps);
  let meanG = r.z;
  let meanGXhat = scale * (r.w - c * meanG);
  // dx = scale · (g − mean(g) − x̂ · mean(g · x̂))
  ${forRow(plan)} {
    let xhat = (x[base + j] - mean - c) * scale;
    dx[base + j] = scale * (dy[base + j] * gamma[j] - meanG - xhat * meanGXhat);
  }
  if (lane == 0u && row < params.rows) { stats[row] = vec4<f32>(mean, c, scale, 0.0); }
}`,
  };
}

// ---- per-feature gradients: column partial sums, then a fixed-order total ----

/** Columns and row lanes of one column-pass workgroup. */
const COLS = 64;
const LANES = WG / COLS;
/** Workgroups the column pass aims for (enough to fill a large GPU). */
const COLUMN_WORKGROUPS = 2048;
/** Fewest rows a chunk sums, so short inputs do not make many tiny partials. */
const MIN_CHUNK_ROWS = 4 * LANES;

const COLUMN_PARAMS = paramLayout([
  ['rows', 'u32'],
  ['n', 'u32'],
  ['colBlocks', 'u32'],
  ['chunks', 'u32'],
  ['rowsPerChunk', 'u32'],
] as const);

const TOTAL_PARAMS = paramLayout([
  ['n', 'u32'],
  ['chunks', 'u32'],
] as const);

type ColumnKind = 'rms' | 'layer';

/**
 * Partial column sums of `chunk` rows: rms sums dy · x · s (dweight); layer
 * sums (dy · x̂, dy) (dgamma, dbeta) from the stored (mean, mean correction, scale).
 */
function columnShader(kind: ColumnKind) {
  const acc = kind === 'rms' ? 'f32' : 'vec2<f32>';
  const term =
    kind === 'rms' ? 'dy[k] * x[k] * st' : 'vec2<f32>(dy[k] * ((x[k] - st.x - st.y) * st.z), dy[k])';
  const kernel = kind === 'rms' ? 'rmsNormBackward' : 'layerNormBackward';
  return {
    key: `normalization/${kernel}/columns/c${COLS}x${LANES}`,
    kernel,
    code: () => `
${COLUMN_PARAMS.wgsl}
${storage(0, 'dy', 'f32', 'read')}
${storage(1, 'x', 'f32', 'read')}
${storage(2, 'stats', kind === 'rms' ? 'f32' : 'vec4<f32>', 'read')}
${storage(3, 'partials', acc, 'read_write')}
${uniform(4)}
var<workgroup> part: array<${acc}, ${WG}>;
@compute @workgroup_size(${COLS}, ${LANES})
fn main(${BUILTINS}) {
  let group = ${linearWorkgroup};
  if (group >= params.colBlocks * params.chunks) { return; }
  let chunk = group / params.colBlocks;
  let j = (group % params.colBlocks) * ${COLS}u + lid.x;
  let r0 = chunk * params.rowsPerChunk;
  let r1 = min(params.rows, r0 + params.rowsPerChunk);
  var acc = ${acc}(0.0);
  if (j < params.n) {
    for (var r = r0 + lid.y; r < r1; r += ${LANES}u) {
      let k = r * params.n + j;
      let st = stats[r];
      acc += ${term};
    }
  }
  part[lid.y * ${COLS}u + lid.x] = acc;
  workgroupBarrier();
  if (lid.y == 0u && j < params.n) {
    var s = part[lid.x];
    for (var l = 1u; l < ${LANES}u; l++) { s += part[l * ${COLS}u + lid.x]; }
    partials[chunk * params.n + j] = s;
  }
}`,
  };
}

function totalShader(kind: ColumnKind) {
  const acc = kind === 'rms' ? 'f32' : 'vec2<f32>';
  const kernel = kind === 'rms' ? 'rmsNormBackward' : 'layerNormBackward';
  const outs = kind === 'rms' ? ['dweight'] : ['dgamma', 'dbeta'];
  const write = kind === 'rms' ? 'dweight[j] = s;' : 'dgamma[j] = s.x;\n  dbeta[j] = s.y;';
  return {
    key: `normalization/${kernel}/total/wg${WG}`,
    kernel,
    code: () => `
${TOTAL_PARAMS.wgsl}
${storage(0, 'partials', acc, 'read')}
${outs.map((name, i) => storage(1 + i, name, 'f32', 'read_write')).join('\n')}
${uniform(1 + outs.length)}
@compute @workgroup_size(${WG})
fn main(${BUILTINS}) {
  let j = (${linearWorkgroup}) * ${WG}u + lid.x;
  if (j >= params.n) { return; }
  var s = ${acc}(0.0);
  for (var c = 0u; c < params.chunks; c++) { s += partials[c * params.n + j]; }
  ${write}
}`,
  };
}

/** Encodes the column sums of the per-feature gradients of `rows` rows of `n` into `outs`. */
function encodeColumnSums(
  encoder: KernelEncoder,
  kind: ColumnKind,
  dy: Operand,
  x: Operand,
  stats: GPUBufferBinding | undefined,
  rows: number,
  n: number,
  outs: readonly Operand[],
): void {
  const width = kind === 'rms' ? 4 : 8;
  const colBlocks = Math.ceil(n / COLS);
  let chunks = 0;
  let rowsPerChunk = 0;
  if (rows > 0) {
    chunks = Math.max(
      1,
      Math.min(Math.ceil(COLUMN_WORKGROUPS / colBlocks), Math.ceil(rows / MIN_CHUNK_ROWS)),
    );
    rowsPerChunk = Math.ceil(rows / chunks);
    chunks = Math.ceil(rows / rowsPerChunk);
  }
  const bytes = Math.max(chunks, 1) * n * width;
  const partials = { buffer: encoder.scratch(bytes), offset: 0, size: bytes };
  if (chunks > 0) {
    encoder.dispatch({
      shader: columnShader(kind),
      buffers: [dy, x, stats!, partials],
      params: { layout: COLUMN_PARAMS, values: { rows, n, colBlocks, chunks, rowsPerChunk } },
      workgroups: gridFor(colBlocks * chunks, encoder.limits),
    });
  }
  encoder.dispatch({
    shader: totalShader(kind),
    buffers: [partials, ...outs],
    params: { layout: TOTAL_PARAMS, values: { n, chunks } },
    workgroups: gridFor(Math.ceil(n / WG), encoder.limits),
  });
}

export const NORMALIZATION_KERNELS: readonly AnyWgpuKernel[] = [
  wgpuKernel(rmsNorm, (encoder, { inputs, outputs, attrs }) => {
    const { rows, plan, values } = rowCall(inputs[0]!, attrs.eps);
    if (rows === 0) return;
    encoder.dispatch({
      shader: rmsNormShader(plan),
      buffers: [inputs[0]!, inputs[1]!, outputs[0]!],
      params: { layout: ROW_PARAMS, values },
      workgroups: rowGrid(encoder, rows, plan),
    });
  }),
  wgpuKernel(layerNorm, (encoder, { inputs, outputs, attrs }) => {
    const { rows, plan, values } = rowCall(inputs[0]!, attrs.eps);
    if (rows === 0) return;
    encoder.dispatch({
      shader: layerNormShader(plan),
      buffers: [inputs[0]!, inputs[1]!, inputs[2]!, outputs[0]!],
      params: { layout: ROW_PARAMS, values },
      workgroups: rowGrid(encoder, rows, plan),
    });
  }),
  wgpuKernel(rmsNormBackward, (encoder, { inputs, outputs, attrs }) => {
    const [dy, x, w] = [inputs[0]!, inputs[1]!, inputs[2]!];
    const { n, rows, plan, values } = rowCall(dy, attrs.eps);
    let stats: GPUBufferBinding | undefined;
    if (rows > 0) {
      stats = { buffer: encoder.scratch(rows * 4), offset: 0, size: rows * 4 };
      encoder.dispatch({
        shader: rmsNormBackwardShader(plan),
        buffers: [dy, x, w, outputs[0]!, stats],
        params: { layout: ROW_PARAMS, values },
        workgroups: rowGrid(encoder, rows, plan),
      });
    }
    // With no rows, dweight is still written: zeros.
    encodeColumnSums(encoder, 'rms', dy, x, stats, rows, n, [outputs[1]!]);
  }),
  wgpuKernel(layerNormBackward, (encoder, { inputs, outputs, attrs }) => {
    const [dy, x, gamma] = [inputs[0]!, inputs[1]!, inputs[2]!];
    const { n, rows, plan, values } = rowCall(dy, attrs.eps);
    let stats: GPUBufferBinding | undefined;
    if (rows > 0) {
      stats = { buffer: encoder.scratch(rows * 16), offset: 0, size: rows * 16 };
      encoder.dispatch({
        shader: layerNormBackwardShader(plan),
        buffers: [dy, x, gamma, outputs[0]!, stats],
        params: { layout: ROW_PARAMS, values },
        workgroups: rowGrid(encoder, rows, plan),
      });
    }
    encodeColumnSums(encoder, 'layer', dy, x, stats, rows, n, [outputs[1]!, outputs[2]!]);
  }),
];
