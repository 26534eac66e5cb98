import { crossEntropy, crossEntropyBackward, FLOAT } from '@rayo/core';
import { type AnyWgpuKernel, wgpuKernel } from '../kernel.js';
import { paramLayout } from '../params.js';
import type { ShaderSource } from '../pipelines.js';
import { narrow, type Scalar, ShaderModule, vectorOf, widen } from '../wgsl/module.js';
import {
  columnLoop,
  onlineMerge,
  planVectorRow,
  rowGrid,
  rowPrologue,
  SUM,
  segmentReduce,
  type VectorRowPlan,
} from '../wgsl/rowReduce.js';
import { WG } from './common.js';
import { encodeWithF32Activations } from './halfEdges.js';

// One segment of invocations per row of logits (see `planVectorRow`: a whole
// workgroup for a large vocabulary, many rows per workgroup for few
// classes). Each invocation keeps an online (max, Σ exp(x − max)) over its
// columns, so the row is read once for the log-sum-exp; the pairs merge in a
// tree in workgroup memory. The mean loss adds the per-row losses in one
// workgroup in a fixed order. A target outside [0, C) is compared as u32 and
// marks its row with NaN bits, tested as bits so that no compiler assumption
// about NaN can drop it.

/** A quiet NaN read from a private variable: WGSL rejects NaN in constant expressions. */
const NAN_DECL = 'var<private> nanBits: u32 = 0x7fc00000u;';
const NAN = 'bitcast<f32>(nanBits)';
const LOWEST = '-3.4028234663852886e38';

const ROW_PARAMS = paramLayout([
  ['rows', 'u32'],
  ['cv', 'u32'],
  ['c', 'u32'],
] as const);

/**
 * The logits-row kernels: `logits` (of the plan's width) and `targets`,
 * then `bindings`, the online merge `rowMaxSum` and, in `main`, the row's
 * `ms` = (max, Σ exp(x − max)), `live`, `tgt` and whether it is `valid`.
 */
function logitsShader(
  name: 'crossEntropy' | 'crossEntropyBackward',
  plan: VectorRowPlan,
  scalar: Scalar,
  bindings: (module: ShaderModule) => void,
  body: string,
): ShaderSource {
  const V = vectorOf('f32', plan.vec);
  // One exp per element: rescale the sum only when the maximum grows.
  const update =
    plan.vec === 4
      ? `  let mn = max(ms.x, max(max(v.x, v.y), max(v.z, v.w)));
  return vec2<f32>(mn, ms.y * exp(ms.x - mn) + dot(exp(v - vec4<f32>(mn)), vec4<f32>(1.0)));`
      : `  let mn = max(ms.x, v);
  let e = exp(min(ms.x, v) - mn);
  return vec2<f32>(mn, select(ms.y + e, ms.y * e + 1.0, v > ms.x));`;
  return {
    key: `loss/${name}/${scalar}/t${plan.threads}/v${plan.vec}/wg${WG}`,
    kernel: name,
    code: () => {
      const module = new ShaderModule();
      module.storage('logits', vectorOf(scalar, plan.vec), 'read');
      module.storage('targets', 'i32', 'read');
      bindings(module);
      module.declare(NAN_DECL);
      module.declare(`fn absorb(ms: vec2<f32>, v: ${V}) -> vec2<f32> {\n${update}\n}`);
      segmentReduce(module, 'rowMaxSum', plan.threads, onlineMerge(module), 'vec2<f32>');
      return module.build(
        ROW_PARAMS,
        WG,
        `${rowPrologue(plan.threads, 'params.cv')}
  let live = row < params.rows;
  var acc = vec2<f32>(${LOWEST}, 0.0);
  ${columnLoop(plan.threads, `acc = absorb(acc, ${widen(scalar, plan.vec, 'logits[base + j]')});`)}
  let ms = rowMaxSum(lid.x, acc);
  let tgt = select(0, targets[min(row, params.rows - 1u)], live);
  let valid = bitcast<u32>(tgt) < params.c;
${body}`,
      );
    },
  };
}

/** WGSL: logits[row, target] through a vec4 binding when vectorised. */
function targetLogit(plan: VectorRowPlan, scalar: Scalar): string {
  const at =
    plan.vec === 4
      ? 'logits[(row * params.c + u32(tgt)) / 4u][(row * params.c + u32(tgt)) % 4u]'
      : 'logits[row * params.c + u32(tgt)]';
  return widen(scalar, 1, at);
}

export function rowLossShader(plan: VectorRowPlan, scalar: Scalar = 'f32'): ShaderSource {
  const bindings = (module: ShaderModule) => module.storage('rowLoss', 'f32', 'read_write');
  return logitsShader(
    'crossEntropy',
    plan,
    scalar,
    bindings,
    `  if (live && lane == 0u) {
    if (valid) {
      rowLoss[row] = ms.x + log(ms.y) - ${targetLogit(plan, scalar)};
    } else {
      rowLoss[row] = ${NAN};
    }
  }`,
  );
}

const MEAN_PARAMS = paramLayout([['rows', 'u32']] as const);

/** The mean of the row losses, NaN when any row is NaN, in one workgroup. */
const meanShader: ShaderSource = {
  key: `loss/crossEntropy/mean/wg${WG}`,
  kernel: 'crossEntropy',
  code: () => {
    const module = new ShaderModule();
    module.storage('rowLoss', 'f32', 'read');
    module.storage('loss', 'f32', 'read_write');
    module.declare(NAN_DECL);
    segmentReduce(module, 'reduce', WG, SUM, 'vec2<f32>');
    return module.build(
      MEAN_PARAMS,
      WG,
      `  // (sum of the finite row losses, count of NaN ones)
  var acc = vec2<f32>(0.0);
  for (var r = lid.x; r < params.rows; r += ${WG}u) {
    let v = rowLoss[r];
    let isNan = (bitcast<u32>(v) & 0x7fffffffu) > 0x7f800000u;
    acc += select(vec2<f32>(v, 0.0), vec2<f32>(0.0, 1.0), isNan);
  }
  let total = reduce(lid.x, acc);
  if (lid.x == 0u) { loss[0] = select(total.x / f32(params.rows), ${NAN}, total.y > 0.0); }`,
    );
  },
};

export function lossBackwardShader(plan: VectorRowPlan, scalar: Scalar = 'f32'): ShaderSource {
  const V = vectorOf('f32', plan.vec);
  const column = plan.vec === 4 ? 'vec4<u32>(j * 4u) + vec4<u32>(0u, 1u, 2u, 3u)' : 'j';
  const hot =
    plan.vec === 4
      ? 'select(vec4<f32>(0.0), vec4<f32>(1.0), col == vec4<u32>(u32(tgt)))'
      : 'select(0.0, 1.0, col == u32(tgt))';
  const bindings = (module: ShaderModule) => {
    module.storage('dloss', 'f32', 'read');
    module.storage('dlogits', vectorOf(scalar, plan.vec), 'read_write');
  };
  const logit = widen(scalar, plan.vec, 'logits[base + j]');
  const store = (value: string) => `dlogits[base + j] = ${narrow(scalar, plan.vec, value)};`;
  return logitsShader(
    'crossEntropyBackward',
    plan,
    scalar,
    bindings,
    `  let scale = dloss[0] / f32(params.rows);
  let inv = 1.0 / ms.y;
  ${columnLoop(
    plan.threads,
    `
    if (valid) {
      let col = ${column};
      ${store(`scale * (exp(${logit} - ${V}(ms.x)) * inv - ${hot})`)}
    } else {
      ${store(`${V}(${NAN})`)}
    }
  `,
  )}`,
  );
}

/** Every shader of the family for rows of `c` classes, for tests. */
export function lossShaders(c: number, scalar: Scalar = 'f32'): ShaderSource[] {
  const plan = planVectorRow(c);
  return [rowLossShader(plan, scalar), meanShader, lossBackwardShader(plan, scalar)];
}

// Half logits (and a half dlogits) go through f32 scratch: widened once, rounded once.
export const LOSS_KERNELS: readonly AnyWgpuKernel[] = [
  wgpuKernel(
    crossEntropy,
    (encoder, { inputs, outputs, io }) => {
      const [rows, c] = io.inputs[0]!.shape as [number, number];
      const plan = planVectorRow(c);
      const bytes = rows * 4;
      const rowLoss = { buffer: encoder.scratch(bytes), offset: 0, size: bytes };
      encodeWithF32Activations(encoder, crossEntropy.name, { logits: inputs[0]! }, {}, (i) => {
        encoder.dispatch({
          shader: rowLossShader(plan),
          buffers: [i.logits, inputs[1]!, rowLoss],
          params: { layout: ROW_PARAMS, values: { rows, cv: plan.loads, c } },
          workgroups: rowGrid(encoder, rows, plan.threads),
        });
      });
      encoder.dispatch({
        shader: meanShader,
        buffers: [rowLoss, outputs[0]!],
        params: { layout: MEAN_PARAMS, values: { rows } },
        workgroups: [1],
      });
    },
    { dtypes: FLOAT },
  ),
  wgpuKernel(
    crossEntropyBackward,
    (encoder, { inputs, outputs, io }) => {
      const [rows, c] = io.inputs[0]!.shape as [number, number];
      const plan = planVectorRow(c);
      encodeWithF32Activations(
        encoder,
        crossEntropyBackward.name,
        { logits: inputs[0]! },
        { dlogits: outputs[0]! },
        (i, o) => {
          encoder.dispatch({
            shader: lossBackwardShader(plan),
            buffers: [i.logits, inputs[1]!, inputs[2]!, o.dlogits],
            params: { layout: ROW_PARAMS, values: { rows, cv: plan.loads, c } },
            workgroups: rowGrid(encoder, rows, plan.threads),
          });
        },
      );
    },
    { dtypes: FLOAT },
  ),
];
