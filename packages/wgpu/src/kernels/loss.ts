import { crossEntropy, crossEntropyBackward, pow2AtLeast } from '@rayo/core';
import { type AnyWgpuKernel, gridFor, linearWorkgroup, storage, uniform, wgpuKernel } from '../kernel.js';
import { paramLayout } from '../params.js';
import { BUILTINS, WG } from './common.js';

// `threads` invocations per row of logits (a whole workgroup for a large
// vocabulary, many rows per workgroup for few classes). Each invocation keeps
// an online (max, Σ exp(x − max)) over its columns, so the row is read once
// for the log-sum-exp; the pairs merge in a tree in workgroup memory. The
// mean loss adds the per-row losses in one workgroup in a fixed order. A
// target outside [0, C) is compared as u32 and marks its row with NaN bits,
// tested as bits so that no compiler assumption about NaN can drop it.

/** A quiet NaN read from a private variable: WGSL rejects NaN in constant expressions. */
const NAN_DECL = 'var<private> nanBits: u32 = 0x7fc00000u;';
const NAN = 'bitcast<f32>(nanBits)';
const LOWEST = '-3.4028234663852886e38';

const ROW_PARAMS = paramLayout([
  ['rows', 'u32'],
  ['cv', 'u32'],
  ['c', 'u32'],
] as const);

interface RowPlan {
  readonly vec: 1 | 4;
  /** Row length in loads. */
  readonly cv: number;
  /** Invocations per row, a power of two dividing WG. */
  readonly threads: number;
}

function planRow(c: number): RowPlan {
  const vec = c % 4 === 0 ? 4 : 1;
  const cv = c / vec;
  return { vec, cv, threads: Math.min(WG, pow2AtLeast(cv)) };
}

/** WGSL shared by the row kernels: the (max, sum) merge, its segmented tree, and the row prologue. */
function rowCommon(plan: RowPlan): string {
  const V = plan.vec === 4 ? 'vec4<f32>' : 'f32';
  const tree =
    plan.threads > 1
      ? `  for (var s = ${plan.threads / 2}u; s > 0u; s >>= 1u) {
    if (lane < s) { red[t] = combine(red[t], red[t + s]); }
    workgroupBarrier();
  }`
      : '';
  // One exp per element: rescale the sum only when the maximum grows.
  const update =
    plan.vec === 4
      ? `  let mn = max(ms.x, max(max(v.x, v.y), max(v.z, v.w)));
  return vec2<f32>(mn, ms.y * exp(ms.x - mn) + dot(exp(v - vec4<f32>(mn)), vec4<f32>(1.0)));`
      : `  let mn = max(ms.x, v);
  let e = exp(min(ms.x, v) - mn);
  return vec2<f32>(mn, select(ms.y + e, ms.y * e + 1.0, v > ms.x));`;
  return `
fn combine(a: vec2<f32>, b: vec2<f32>) -> vec2<f32> {
  let m = max(a.x, b.x);
  return vec2<f32>(m, a.y * exp(a.x - m) + b.y * exp(b.x - m));
}
fn absorb(ms: vec2<f32>, v: ${V}) -> vec2<f32> {
${update}
}
var<workgroup> red: array<vec2<f32>, ${WG}>;
/** (max, Σ exp(x − max)) of the row, for every invocation of its segment. */
fn rowMaxSum(v: vec2<f32>, t: u32) -> vec2<f32> {
  let lane = t % ${plan.threads}u;
  red[t] = v;
  workgroupBarrier();
${tree}
  return red[t - lane];
}`;
}

function rowPrologue(plan: RowPlan): string {
  return `  let t = lid.x;
  let row = (${linearWorkgroup}) * ${WG / plan.threads}u + t / ${plan.threads}u;
  let lane = t % ${plan.threads}u;
  let live = row < params.rows;
  let end = select(0u, params.cv, live);
  let base = row * params.cv;
  var acc = vec2<f32>(${LOWEST}, 0.0);
  for (var j = lane; j < end; j += ${plan.threads}u) { acc = absorb(acc, logits[base + j]); }
  let ms = rowMaxSum(acc, t);
  let tgt = select(0, targets[min(row, params.rows - 1u)], live);
  let valid = bitcast<u32>(tgt) < params.c;`;
}

/** WGSL: logits[row, target] through a vec4 binding when vectorised. */
function targetLogit(plan: RowPlan): string {
  return plan.vec === 4
    ? 'logits[(row * params.c + u32(tgt)) / 4u][(row * params.c + u32(tgt)) % 4u]'
    : 'logits[row * params.c + u32(tgt)]';
}

function rowKey(name: string, plan: RowPlan): string {
  return `loss/${name}/t${plan.threads}/v${plan.vec}/wg${WG}`;
}

function rowLossShader(plan: RowPlan) {
  return {
    key: rowKey('crossEntropy', plan),
    kernel: 'crossEntropy',
    code: () => `
${ROW_PARAMS.wgsl}
${storage(0, 'logits', plan.vec === 4 ? 'vec4<f32>' : 'f32', 'read')}
${storage(1, 'targets', 'i32', 'read')}
${storage(2, 'rowLoss', 'f32', 'read_write')}
${uniform(3)}
${NAN_DECL}
${rowCommon(plan)}
@compute @workgroup_size(${WG})
fn main(${BUILTINS}) {
${rowPrologue(plan)}
  if (live && lane == 0u) {
    if (valid) {
      rowLoss[row] = ms.x + log(ms.y) - ${targetLogit(plan)};
    } else {
      rowLoss[row] = ${NAN};
    }
  }
}`,
  };
}

const MEAN_PARAMS = paramLayout([['rows', 'u32']] as const);

/** The mean of the row losses, NaN when any row is NaN, in one workgroup. */
const meanShader = {
  key: `loss/crossEntropy/mean/wg${WG}`,
  kernel: 'crossEntropy',
  code: () => `
${MEAN_PARAMS.wgsl}
${storage(0, 'rowLoss', 'f32', 'read')}
${storage(1, 'loss', 'f32', 'read_write')}
${uniform(2)}
${NAN_DECL}
var<workgroup> red: array<vec2<f32>, ${WG}>;
@compute @workgroup_size(${WG})
fn main(${BUILTINS}) {
  let t = lid.x;
  // (sum of the finite row losses, count of NaN ones)
  var acc = vec2<f32>(0.0);
  for (var r = t; r < params.rows; r += ${WG}u) {
    let v = rowLoss[r];
    let isNan = (bitcast<u32>(v) & 0x7fffffffu) > 0x7f800000u;
    acc += select(vec2<f32>(v, 0.0), vec2<f32>(0.0, 1.0), isNan);
  }
  red[t] = acc;
  workgroupBarrier();
  for (var s = ${WG / 2}u; s > 0u; s >>= 1u) {
    if (t < s) { red[t] += red[t + s]; }
    workgroupBarrier();
  }
  if (t == 0u) { loss[0] = select(red[0].x / f32(params.rows), ${NAN}, red[0].y > 0.0); }
}`,
};

function backwardShader(plan: RowPlan) {
  const V = plan.vec === 4 ? 'vec4<f32>' : 'f32';
  const column = plan.vec === 4 ? 'vec4<u32>(j * 4u) + vec4<u32>(0u, 1u, 2u, 3u)' : 'j';
  const hot =
    plan.vec === 4
      ? 'select(vec4<f32>(0.0), vec4<f32>(1.0), col == vec4<u32>(u32(tgt)))'
      : 'select(0.0, 1.0, col == u32(tgt))';
  return {
    key: rowKey('crossEntropyBackward', plan),
    kernel: 'crossEntropyBackward',
    code: () => `
${ROW_PARAMS.wgsl}
${storage(0, 'logits', V, 'read')}
${storage(1, 'targets', 'i32', 'read')}
${storage(2, 'dloss', 'f32', 'read')}
${storage(3, 'dlogits', V, 'read_write')}
${uniform(4)}
${NAN_DECL}
${rowCommon(plan)}
@compute @workgroup_size(${WG})
fn main(${BUILTINS}) {
${rowPrologue(plan)}
  let scale = dloss[0] / f32(params.rows);
  let inv = 1.0 / ms.y;
  for (var j = lane; j < end; j += ${plan.threads}u) {
    if (valid) {
      let col = ${column};
      dlogits[base + j] = scale * (exp(logits[base + j] - ${V}(ms.x)) * inv - ${hot});
    } else {
      dlogits[base + j] = ${V}(${NAN});
    }
  }
}`,
  };
}

function rowGrid(limits: GPUSupportedLimits, rows: number, plan: RowPlan): [number, number] {
  return gridFor(Math.ceil(rows / (WG / plan.threads)), limits);
}

export const LOSS_KERNELS: readonly AnyWgpuKernel[] = [
  wgpuKernel(crossEntropy, (encoder, { inputs, outputs, io }) => {
    const [rows, c] = io.inputs[0]!.shape as [number, number];
    const plan = planRow(c);
    const bytes = rows * 4;
    const rowLoss = { buffer: encoder.scratch(bytes), offset: 0, size: bytes };
    encoder.dispatch({
      shader: rowLossShader(plan),
      buffers: [inputs[0]!, inputs[1]!, rowLoss],
      params: { layout: ROW_PARAMS, values: { rows, cv: plan.cv, c } },
      workgroups: rowGrid(encoder.limits, rows, plan),
    });
    encoder.dispatch({
      shader: meanShader,
      buffers: [rowLoss, outputs[0]!],
      params: { layout: MEAN_PARAMS, values: { rows } },
      workgroups: [1],
    });
  }),
  wgpuKernel(crossEntropyBackward, (encoder, { inputs, outputs, io }) => {
    const [rows, c] = io.inputs[0]!.shape as [number, number];
    const plan = planRow(c);
    encoder.dispatch({
      shader: backwardShader(plan),
      buffers: [inputs[0]!, inputs[1]!, inputs[2]!, outputs[0]!],
      params: { layout: ROW_PARAMS, values: { rows, cv: plan.cv, c } },
      workgroups: rowGrid(encoder.limits, rows, plan),
    });
  }),
];
