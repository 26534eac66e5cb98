import { FLOAT, isHalf, layerNorm, layerNormBackward, rmsNorm, rmsNormBackward } from '@rayo/core';
import { type AnyWgpuKernel, gridFor, type KernelEncoder, type Operand, wgpuKernel } from '../kernel.js';
import { paramLayout } from '../params.js';
import type { ShaderSource } from '../pipelines.js';
import { bindingType, loadScalar, quadType, unpackQuad } from '../wgsl/half.js';
import {
  linearWorkgroup,
  narrow,
  type Scalar,
  ShaderModule,
  vectorOf,
  type Width,
  widen,
} from '../wgsl/module.js';
import {
  columnLoop,
  declareRowInput,
  planVectorRow,
  type RowInput,
  rowGrid,
  rowInputKey,
  rowPrologue,
  SUM,
  segmentReduce,
  type VectorRowPlan,
} from '../wgsl/rowReduce.js';
import { WG } from './common.js';
import { encodeWithF32Activations, f32Scratch } from './halfEdges.js';

// Row kernels: one segment of invocations per row of the last axis (see
// `planVectorRow`), statistics from tree reductions in workgroup memory,
// vec4 loads when the row length allows.
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

/** WGSL: the sum of the lanes of `e`. */
const hsum = (vec: Width, e: string) => (vec === 4 ? `dot(${e}, vec4<f32>(1.0))` : `(${e})`);
/** WGSL: the sum of squares of the lanes of `e`. */
const sumSq = (vec: Width, e: string) => (vec === 4 ? `dot(${e}, ${e})` : `(${e}) * (${e})`);

/** Reads an input as f32 at load `j` of the row (`base + j`) or of the feature vector (`j`); stores f32 as the row type. */
interface RowAccess {
  readonly row: (name: string) => string;
  readonly feature: (name: string) => string;
  readonly store: (name: string, value: string) => string;
}

/**
 * A row kernel: `inputs` read and `output` written at the plan's width, then
 * the per-row `stats` (backward only), and a segment sum per entry of `sums`.
 */
function normShader(
  name: string,
  plan: VectorRowPlan,
  scalar: RowInput,
  bindings: { inputs: readonly string[]; output: string; stats?: 'f32' | 'vec4<f32>' },
  sums: Readonly<Record<string, 'f32' | 'vec2<f32>' | 'vec4<f32>'>>,
  body: (access: RowAccess) => string,
): ShaderSource {
  return {
    key: rowKey(name, plan, scalar),
    kernel: name,
    code: () => {
      const module = new ShaderModule();
      // Rows in words are read as u32 (4 halves per vec2<u32>); their output is f32, rounded after.
      const words = typeof scalar === 'string' ? undefined : scalar.words;
      const stored = typeof scalar === 'string' ? scalar : 'f32';
      const rowType = words
        ? plan.vec === 4
          ? quadType(words)
          : bindingType(words, false)
        : vectorOf(stored, plan.vec);
      const load = (input: string, index: string) =>
        !words
          ? widen(stored, plan.vec, `${input}[${index}]`)
          : plan.vec === 4
            ? unpackQuad(words, `${input}[${index}]`)
            : loadScalar(words, input, index);
      for (const input of bindings.inputs) module.storage(input, rowType, 'read');
      module.storage(bindings.output, vectorOf(stored, plan.vec), 'read_write');
      declareRowInput(module, scalar);
      if (bindings.stats) module.storage('stats', bindings.stats, 'read_write');
      for (const [sum, type] of Object.entries(sums)) segmentReduce(module, sum, plan.threads, SUM, type);
      const access: RowAccess = {
        row: (input) => load(input, 'base + j'),
        feature: (input) => load(input, 'j'),
        store: (output, value) => `${output}[base + j] = ${narrow(stored, plan.vec, value)};`,
      };
      return module.build(
        ROW_PARAMS,
        WG,
        `${rowPrologue(plan.threads, 'params.nv')}
${body(access)}`,
      );
    },
  };
}

function rowKey(name: string, plan: VectorRowPlan, scalar: RowInput): string {
  return `normalization/${name}/${rowInputKey(scalar)}/t${plan.threads}/v${plan.vec}/wg${WG}`;
}

/**
 * WGSL: the row's mean as `mean + m.x` (a rounded first-pass mean and its
 * correction, so rows far from zero keep the digits of x − mean) and its
 * biased variance `m.y`, from two passes: E[x²] − E[x]² would cancel.
 */
function rowMoments(plan: VectorRowPlan, x: string): string {
  return `  var acc = 0.0;
  ${columnLoop(plan.threads, `acc += ${hsum(plan.vec, x)};`)}
  let mean = rowSum(lid.x, acc) / params.n;
  var dev = vec2<f32>(0.0);
  ${columnLoop(plan.threads, `let d = ${x} - mean; dev += vec2<f32>(${hsum(plan.vec, 'd')}, ${sumSq(plan.vec, 'd')});`)}
  let r = rowSum2(lid.x, dev) / params.n;
  let m = vec2<f32>(r.x, max(r.y - r.x * r.x, 0.0));`;
}

// ---- forward -----------------------------------------------------------------

export function rmsNormShader(plan: VectorRowPlan, scalar: RowInput = 'f32'): ShaderSource {
  const { threads, vec } = plan;
  return normShader(
    'rmsNorm',
    plan,
    scalar,
    { inputs: ['x', 'w'], output: 'y' },
    { rowSum: 'f32' },
    (a) => `
  var acc = 0.0;
  ${columnLoop(threads, `let v = ${a.row('x')}; acc += ${sumSq(vec, 'v')};`)}
  let s = inverseSqrt(rowSum(lid.x, acc) / params.n + params.eps);
  ${columnLoop(threads, a.store('y', `${a.row('x')} * s * ${a.feature('w')}`))}`,
  );
}

export function layerNormShader(plan: VectorRowPlan, scalar: RowInput = 'f32'): ShaderSource {
  const sums = { rowSum: 'f32', rowSum2: 'vec2<f32>' } as const;
  return normShader(
    'layerNorm',
    plan,
    scalar,
    { inputs: ['x', 'g', 'b'], output: 'y' },
    sums,
    (a) => `
${rowMoments(plan, a.row('x'))}
  let scale = inverseSqrt(m.y + params.eps);
  ${columnLoop(plan.threads, a.store('y', `(${a.row('x')} - mean - m.x) * scale * ${a.feature('g')} + ${a.feature('b')}`))}`,
  );
}

/** How the row kernels read `x`: f32, or halves in u32 words. */
function rowInputOf(x: Operand): RowInput {
  return isHalf(x.dtype) ? { words: x.dtype } : 'f32';
}

function rowCall(x: Operand, eps: number) {
  const n = x.shape[x.shape.length - 1]!;
  const rows = n === 0 ? 0 : x.size / n;
  const plan = planVectorRow(n);
  return { n, rows, plan, values: { rows, nv: plan.loads, n, eps } };
}

// ---- backward ----------------------------------------------------------------

export function rmsNormBackwardShader(plan: VectorRowPlan, scalar: Scalar = 'f32'): ShaderSource {
  const { threads, vec } = plan;
  const bindings = { inputs: ['dy', 'x', 'w'], output: 'dx', stats: 'f32' } as const;
  return normShader(
    'rmsNormBackward',
    plan,
    scalar,
    bindings,
    { rowSum: 'vec2<f32>' },
    (a) => `
  var acc = vec2<f32>(0.0);
  ${columnLoop(
    threads,
    `
    let xv = ${a.row('x')};
    let gv = ${a.row('dy')} * ${a.feature('w')};
    acc += vec2<f32>(${sumSq(vec, 'xv')}, ${hsum(vec, 'gv * xv')});
  `,
  )}
  let r = rowSum(lid.x, acc);
  let s = inverseSqrt(r.x / params.n + params.eps);
  // dx = s · dy · w − s³ · x · Σ(dy · w · x) / n
  let c = s * s * s * r.y / params.n;
  ${columnLoop(threads, a.store('dx', `s * ${a.row('dy')} * ${a.feature('w')} - c * ${a.row('x')}`))}
  if (lane == 0u && row < params.rows) { stats[row] = s; }`,
  );
}

export function layerNormBackwardShader(plan: VectorRowPlan, scalar: Scalar = 'f32'): ShaderSource {
  const { threads, vec } = plan;
  const bindings = { inputs: ['dy', 'x', 'gamma'], output: 'dx', stats: 'vec4<f32>' } as const;
  const sums = { rowSum: 'f32', rowSum3: 'vec4<f32>' } as const;
  return normShader(
    'layerNormBackward',
    plan,
    scalar,
    bindings,
    sums,
    (a) => `
  var acc = 0.0;
  ${columnLoop(threads, `acc += ${hsum(vec, a.row('x'))};`)}
  let mean = rowSum(lid.x, acc) / params.n;
  // Σd, Σd², Σg and Σg·d with d = x − mean, g = dy · gamma, in one pass; Σd
  // corrects the rounded mean (see rowMoments).
  var acc4 = vec4<f32>(0.0);
  ${columnLoop(
    threads,
    `
    let d = ${a.row('x')} - mean;
    let gv = ${a.row('dy')} * ${a.feature('gamma')};
    acc4 += vec4<f32>(${hsum(vec, 'd')}, ${sumSq(vec, 'd')}, ${hsum(vec, 'gv')}, ${hsum(vec, 'gv * d')});
  `,
  )}
  let r = rowSum3(lid.x, acc4) / params.n;
  let c = r.x;
  let scale = inverseSqrt(max(r.y - c * c, 0.0) + params.eps);
  let meanG = r.z;
  let meanGXhat = scale * (r.w - c * meanG);
  // dx = scale · (g − mean(g) − x̂ · mean(g · x̂))
  ${columnLoop(
    threads,
    `
    let xhat = (${a.row('x')} - mean - c) * scale;
    ${a.store('dx', `scale * (${a.row('dy')} * ${a.feature('gamma')} - meanG - xhat * meanGXhat)`)}
  `,
  )}
  if (lane == 0u && row < params.rows) { stats[row] = vec4<f32>(mean, c, scale, 0.0); }`,
  );
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
function columnShader(kind: ColumnKind, scalar: Scalar = 'f32'): ShaderSource {
  const acc = kind === 'rms' ? 'f32' : 'vec2<f32>';
  const [dy, x] = [widen(scalar, 1, 'dy[k]'), widen(scalar, 1, 'x[k]')];
  const term =
    kind === 'rms' ? `${dy} * ${x} * st` : `vec2<f32>(${dy} * ((${x} - st.x - st.y) * st.z), ${dy})`;
  const kernel = kind === 'rms' ? 'rmsNormBackward' : 'layerNormBackward';
  return {
    key: `normalization/${kernel}/columns/${scalar}/c${COLS}x${LANES}`,
    kernel,
    code: () => {
      const module = new ShaderModule();
      module.storage('dy', scalar, 'read');
      module.storage('x', scalar, 'read');
      module.storage('stats', kind === 'rms' ? 'f32' : 'vec4<f32>', 'read');
      module.storage('partials', acc, 'read_write');
      module.workgroupArray('part', acc, WG);
      return module.build(
        COLUMN_PARAMS,
        `${COLS}, ${LANES}`,
        `  let group = ${linearWorkgroup};
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
  }`,
      );
    },
  };
}

function totalShader(kind: ColumnKind): ShaderSource {
  const acc = kind === 'rms' ? 'f32' : 'vec2<f32>';
  const kernel = kind === 'rms' ? 'rmsNormBackward' : 'layerNormBackward';
  const outs = kind === 'rms' ? ['dweight'] : ['dgamma', 'dbeta'];
  const write = kind === 'rms' ? 'dweight[j] = s;' : 'dgamma[j] = s.x;\n  dbeta[j] = s.y;';
  return {
    key: `normalization/${kernel}/total/wg${WG}`,
    kernel,
    code: () => {
      const module = new ShaderModule();
      module.storage('partials', acc, 'read');
      for (const name of outs) module.storage(name, 'f32', 'read_write');
      return module.build(
        TOTAL_PARAMS,
        WG,
        `  let j = (${linearWorkgroup}) * ${WG}u + lid.x;
  if (j >= params.n) { return; }
  var s = ${acc}(0.0);
  for (var c = 0u; c < params.chunks; c++) { s += partials[c * params.n + j]; }
  ${write}`,
      );
    },
  };
}

/** Every shader of the family for rows of `n`, for tests. */
export function normalizationShaders(n: number, scalar: Scalar = 'f32'): ShaderSource[] {
  const plan = planVectorRow(n);
  return [
    ...[rmsNormShader, layerNormShader, rmsNormBackwardShader, layerNormBackwardShader].map((shader) =>
      shader(plan, scalar),
    ),
    ...(['rms', 'layer'] as const).flatMap((kind) => [columnShader(kind, scalar), totalShader(kind)]),
  ];
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

/**
 * rmsNorm or layerNorm: the row pass over x and the weight vectors, a half y
 * computed in f32 scratch and rounded once.
 */
function normKernel(
  spec: typeof rmsNorm | typeof layerNorm,
  shaderOf: (plan: VectorRowPlan, scalar: RowInput) => ShaderSource,
): AnyWgpuKernel {
  return wgpuKernel(
    spec,
    (encoder, { inputs, outputs, attrs }) => {
      const x = inputs[0]!;
      const { rows, plan, values } = rowCall(x, attrs.eps);
      if (rows === 0) return;
      encodeWithF32Activations(encoder, spec.name, {}, { y: outputs[0]! }, (_, o) => {
        encoder.dispatch({
          shader: shaderOf(plan, rowInputOf(x)),
          buffers: [...inputs.map((input) => input!), o.y!],
          params: { layout: ROW_PARAMS, values },
          workgroups: rowGrid(encoder, rows, plan.threads),
        });
      });
    },
    { dtypes: FLOAT },
  );
}

/**
 * rmsNorm(x, weight, eps) of x [M, K] (any float dtype) into f32 scratch:
 * how a product given a `normWeight` (core's foldedNorm.ts) takes it here,
 * the norm first.
 */
export function normedF32(encoder: KernelEncoder, x: Operand, weight: Operand, eps: number, kernel: string) {
  const y = f32Scratch(encoder, x, kernel, 'x');
  const { rows, plan, values } = rowCall(x, eps);
  if (rows === 0) return y;
  encoder.dispatch({
    shader: rmsNormShader(plan, rowInputOf(x)),
    buffers: [x, weight, y],
    params: { layout: ROW_PARAMS, values },
    workgroups: rowGrid(encoder, rows, plan.threads),
  });
  return y;
}

export const NORMALIZATION_KERNELS: readonly AnyWgpuKernel[] = [
  // Half rows and weights are read in u32 words.
  normKernel(rmsNorm, rmsNormShader),
  normKernel(layerNorm, layerNormShader),
  // The backward kernels take half tensors through f32 scratch (widened, and rounded once after).
  wgpuKernel(
    rmsNormBackward,
    (encoder, { inputs, outputs, attrs }) => encodeNormBackward(encoder, 'rms', inputs, outputs, attrs.eps),
    { dtypes: FLOAT },
  ),
  wgpuKernel(
    layerNormBackward,
    (encoder, { inputs, outputs, attrs }) => encodeNormBackward(encoder, 'layer', inputs, outputs, attrs.eps),
    { dtypes: FLOAT },
  ),
];

/** dx through the row pass (which also writes each row's statistics), then the column sums of the weight gradients. */
function encodeNormBackward(
  encoder: KernelEncoder,
  kind: ColumnKind,
  inputs: readonly (Operand | undefined)[],
  outputs: readonly Operand[],
  eps: number,
): void {
  const spec = kind === 'rms' ? rmsNormBackward : layerNormBackward;
  const [dy, x, w] = [inputs[0]!, inputs[1]!, inputs[2]!];
  const [dx, ...dweights] = outputs;
  const grads = Object.fromEntries(dweights.map((t, i) => [`out[${i + 1}]`, t]));
  encodeWithF32Activations(encoder, spec.name, { dy, x, w }, { dx, ...grads }, (i, o) => {
    const { n, rows, plan, values } = rowCall(i.dy, eps);
    let stats: GPUBufferBinding | undefined;
    if (rows > 0) {
      const bytes = rows * (kind === 'rms' ? 4 : 16);
      stats = { buffer: encoder.scratch(bytes), offset: 0, size: bytes };
      encoder.dispatch({
        shader: kind === 'rms' ? rmsNormBackwardShader(plan) : layerNormBackwardShader(plan),
        buffers: [i.dy, i.x, i.w, o.dx!, stats],
        params: { layout: ROW_PARAMS, values },
        workgroups: rowGrid(encoder, rows, plan.threads),
      });
    }
    // With no rows, the weight gradients are still written: zeros.
    const sums = Object.entries(o)
      .filter(([name]) => name !== 'dx')
      .map(([, t]) => t!);
    encodeColumnSums(encoder, kind, i.dy, i.x, stats, rows, n, sums);
  });
}
