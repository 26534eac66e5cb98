import {
  ADAMW_MOMENT_CONSTANTS,
  adamwMomentConstants,
  adamwStep,
  bytesPerElement,
  clipByGlobalNorm,
  FLOAT,
  globalNorm,
  isHalf,
  multiTensorAdamw,
  sgdStep,
  UnsupportedOnBackendError,
} from '@rayo/core';
import {
  type AnyWgpuKernel,
  gridFor,
  type KernelEncoder,
  linearWorkgroup,
  type Operand,
  wgpuKernel,
} from '../kernel.js';
import { type ParamLayout, type ParamType, paramLayout } from '../params.js';
import type { ShaderSource } from '../pipelines.js';
import {
  bindingType,
  declareHalf,
  halfFunctions,
  loadScalar,
  quadType,
  type Storage,
  storageOf,
  unpack2,
  unpackQuad,
} from '../wgsl/half.js';
import { ShaderModule } from '../wgsl/module.js';
import { elementGrid, elementIndex, WG } from './common.js';

/** Threads of a grid of `WG`-thread workgroups. */
function threadsOf(grid: readonly number[]): number {
  return grid.reduce((a, b) => a * b, 1) * WG;
}

// ---- in-place elementwise updates: vec4 body, scalar tail --------------------

interface UpdateDecl {
  /** Key prefix and kernel name. */
  readonly name: string;
  readonly kernel: string;
  /** Operand binding names in call order, with whether the update writes them. */
  readonly operands: readonly (readonly [string, 'read' | 'read_write'])[];
  /** Extra read-only bindings after the operands (e.g. a scale computed on the device): a name (f32) or [name, element type]. */
  readonly extra?: readonly (string | readonly [string, 'f32' | 'i32'])[];
  /** WGSL functions the prologue or body call. */
  readonly helpers?: string;
  /** WGSL statements run before any operand is touched; may `return` early. */
  readonly prologue?: string;
  /** WGSL statements on `let` values named after the operands, assigning `<name>_out` for written ones; T is f32 or vec4<f32>. */
  readonly body: string;
  /**
   * Caps the workgroups; threads then loop over the elements. Unset: one
   * vector per thread, which streams fastest.
   */
  readonly maxWorkgroups?: number;
  /** Uniform fields after `n`, `base` and `stride`. */
  readonly layout: ParamLayout<string>;
}

/** The uniform layout of an update: `n`, `base` and `stride` first, then the kernel's fields. */
function updateLayout<const F extends readonly (readonly [string, 'u32' | 'f32'])[]>(fields: F) {
  return paramLayout([['n', 'u32'], ['base', 'u32'], ['stride', 'u32'], ...fields] as const);
}

/** `grad` may be half (u32 words): widened as it is read, 4 halves per vec2<u32> load. */
function updateShader(decl: UpdateDecl, vec: boolean, grad: Storage = 'f32'): ShaderSource {
  const type = vec ? 'vec4<f32>' : 'f32';
  const bindingOf = (name: string) =>
    name !== 'grad' ? type : vec ? quadType(grad) : bindingType(grad, false);
  const load = (name: string) =>
    name !== 'grad'
      ? `${name}_buf[i]`
      : vec
        ? unpackQuad(grad, `${name}_buf[i]`)
        : loadScalar(grad, `${name}_buf`, 'i');
  const ops = decl.operands;
  const written = ops.filter(([, access]) => access === 'read_write').map(([name]) => name);
  const extra = decl.extra ?? [];
  return {
    key: `optimizer/${decl.name}/${vec ? 'vec4' : 'scalar'}${grad === 'f32' ? '' : `/grad-${grad}`}/wg${WG}`,
    kernel: decl.kernel,
    code: () => {
      const module = new ShaderModule().params(decl.layout);
      module.declare(`alias T = ${type};`);
      for (const [name, access] of ops) module.storage(`${name}_buf`, bindingOf(name), access);
      for (const e of extra) {
        const [name, type] = typeof e === 'string' ? [e, 'f32' as const] : e;
        module.storage(name, type, 'read');
      }
      module.declare(decl.helpers ?? '');
      module.declare(halfFunctions(grad));
      return module.build(
        undefined,
        WG,
        `  ${decl.prologue ?? ''}
  for (var i = params.base + (${linearWorkgroup}) * ${WG}u + lid.x; i < params.n; i += params.stride) {
${ops.map(([name]) => `    let ${name} = ${load(name)};`).join('\n')}
${written.map((name) => `    var ${name}_out: T;`).join('\n')}
    ${decl.body}
${written.map((name) => `    ${name}_buf[i] = ${name}_out;`).join('\n')}
  }`,
      );
    },
  };
}

/**
 * Runs an update over `n` elements of equally long operands: vec4 over the
 * first ⌊n/4⌋ vectors, then scalars over the last n mod 4 elements, bound from
 * the last aligned offset before them (one writable buffer cannot be bound
 * twice, as vec4 and as f32).
 */
function dispatchUpdate(
  encoder: KernelEncoder,
  decl: UpdateDecl,
  operands: readonly Operand[],
  extra: readonly (Operand | GPUBufferBinding)[],
  values: Readonly<Record<string, number>>,
): void {
  const n = operands[0]!.size;
  if (n === 0) return;
  const gradAt = decl.operands.findIndex(([name]) => name === 'grad');
  const grad = gradAt < 0 ? 'f32' : storageOf(operands[gradAt]!.dtype);
  const vecs = Math.floor(n / 4);
  if (vecs > 0) {
    const grid = decl.maxWorkgroups
      ? gridFor(Math.min(decl.maxWorkgroups, Math.ceil(vecs / WG)), encoder.limits)
      : elementGrid(encoder, vecs);
    encoder.dispatch({
      shader: updateShader(decl, true, grad),
      buffers: [...operands, ...extra],
      params: { layout: decl.layout, values: { ...values, n: vecs, base: 0, stride: threadsOf(grid) } },
      workgroups: grid,
    });
  }
  const done = vecs * 4;
  if (done === n) return;
  // Elements from an offset every operand's binding accepts (2-byte halves need twice as many).
  const align = encoder.limits.minStorageBufferOffsetAlignment / (grad === 'f32' ? 4 : 2);
  const from = Math.floor(done / align) * align;
  encoder.dispatch({
    shader: updateShader(decl, false, grad),
    buffers: [
      ...operands.map((op) => {
        const bytes = bytesPerElement(op.dtype);
        return {
          buffer: op.buffer,
          offset: op.offset + from * bytes,
          size: Math.ceil(((n - from) * bytes) / 4) * 4,
        };
      }),
      ...extra,
    ],
    params: { layout: decl.layout, values: { ...values, n: n - from, base: done - from, stride: WG } },
    workgroups: [1],
  });
}

// ---- adamwStep ---------------------------------------------------------------

const ADAMW: UpdateDecl = {
  name: 'adamwStep',
  kernel: 'adamwStep',
  operands: [
    ['param', 'read_write'],
    ['grad', 'read'],
    ['m', 'read_write'],
    ['v', 'read_write'],
  ],
  layout: updateLayout([
    ['decay', 'f32'],
    ['stepSize', 'f32'],
    ['rootCorrection', 'f32'],
    ['eps', 'f32'],
    ['beta1', 'f32'],
    ['oneMinusBeta1', 'f32'],
    ['beta2', 'f32'],
    ['oneMinusBeta2', 'f32'],
  ] as const),
  // PyTorch: p ← p·(1 − lr·wd) − (lr / bc1) · m / (√v / √bc2 + eps).
  body: `m_out = params.beta1 * m + params.oneMinusBeta1 * grad;
  v_out = params.beta2 * v + params.oneMinusBeta2 * grad * grad;
  let denom = sqrt(v_out) * params.rootCorrection + params.eps;
  param_out = param * params.decay - params.stepSize * m_out / denom;`,
};

const ADAMW_DEVICE_LAYOUT = updateLayout([
  ['step', 'f32'],
  ['lr', 'f32'],
  ['logBeta1', 'f32'],
  ['logBeta2', 'f32'],
  ['weightDecay', 'f32'],
  ['eps', 'f32'],
  ['beta1', 'f32'],
  ['oneMinusBeta1', 'f32'],
  ['beta2', 'f32'],
  ['oneMinusBeta2', 'f32'],
] as const);

/** e^x − 1 for x ≤ 0: the series (8 terms, error below 1e-10 relative) where |x| < 1/4, else exp. */
const EXPM1 = `
fn expm1(x: f32) -> f32 {
  let series = x * (1.0 + x * (1.0 / 2.0 + x * (1.0 / 6.0 + x * (1.0 / 24.0 + x * (1.0 / 120.0
    + x * (1.0 / 720.0 + x * (1.0 / 5040.0 + x * (1.0 / 40320.0))))))));
  return select(exp(x) - 1.0, series, abs(x) < 0.25);
}`;

/**
 * AdamW with the step t and/or the learning rate read from device tensors.
 * The per-launch constants are formed once per thread before the loop, in
 * f32: 1 − β^t = −expm1(t·ln β) with ln β from the host in f64 and expm1 by
 * its series where 1 − e^x would cancel, so that a small t·(1 − β) keeps its
 * digits.
 */
function adamwDeviceDecl(deviceStep: boolean, deviceLr: boolean): UpdateDecl {
  const extra: [string, 'f32' | 'i32'][] = [];
  if (deviceStep) extra.push(['stepAt', 'i32']);
  if (deviceLr) extra.push(['lrAt', 'f32']);
  return {
    name: `adamwStep/device${deviceStep ? '-step' : ''}${deviceLr ? '-lr' : ''}`,
    kernel: 'adamwStep',
    operands: ADAMW.operands,
    extra,
    helpers: EXPM1,
    layout: ADAMW_DEVICE_LAYOUT,
    prologue: `let t = ${deviceStep ? 'f32(stepAt[0])' : 'params.step'};
  let lr = ${deviceLr ? 'lrAt[0]' : 'params.lr'};
  let bc1 = -expm1(t * params.logBeta1);
  let bc2 = -expm1(t * params.logBeta2);
  let decay = 1.0 - lr * params.weightDecay;
  let stepSize = lr / bc1;
  let rootCorrection = 1.0 / sqrt(bc2);`,
    body: `m_out = params.beta1 * m + params.oneMinusBeta1 * grad;
  v_out = params.beta2 * v + params.oneMinusBeta2 * grad * grad;
  let denom = sqrt(v_out) * rootCorrection + params.eps;
  param_out = param * decay - stepSize * m_out / denom;`,
  };
}

/** Indexed by 2·(step on the device) + (lr on the device). */
const ADAMW_DEVICE = [false, true].flatMap((deviceStep) =>
  [false, true].map((deviceLr) => adamwDeviceDecl(deviceStep, deviceLr)),
);

const adamwKernel = wgpuKernel(
  adamwStep,
  (encoder, { inputs, attrs }) => {
    const { lr, beta1, beta2, eps, weightDecay, step } = attrs;
    const operands = [inputs[0]!, inputs[1]!, inputs[2]!, inputs[3]!];
    const stepAt = inputs[4];
    const lrAt = inputs[5];
    if (stepAt || lrAt) {
      const decl = ADAMW_DEVICE[(stepAt ? 2 : 0) + (lrAt ? 1 : 0)]!;
      dispatchUpdate(encoder, decl, operands, [...(stepAt ? [stepAt] : []), ...(lrAt ? [lrAt] : [])], {
        ...adamwMomentConstants(attrs),
        step,
        lr,
        weightDecay,
      });
      return;
    }
    // The corrections are formed in f64 here: 1 − β^t loses everything in f32 for small t·(1 − β).
    const bc1 = -Math.expm1(step * Math.log(beta1));
    const bc2 = -Math.expm1(step * Math.log(beta2));
    dispatchUpdate(encoder, ADAMW, operands, [], {
      decay: 1 - lr * weightDecay,
      stepSize: lr / bc1,
      rootCorrection: 1 / Math.sqrt(bc2),
      eps,
      beta1,
      oneMinusBeta1: 1 - beta1,
      beta2,
      oneMinusBeta2: 1 - beta2,
    });
  },
  { dtypes: FLOAT },
);

// ---- sgdStep -------------------------------------------------------------------

const SGD_LAYOUT = updateLayout([
  ['lr', 'f32'],
  ['momentum', 'f32'],
  ['oneMinusDampening', 'f32'],
  ['weightDecay', 'f32'],
] as const);

function sgdDecl(variant: 'plain' | 'momentum' | 'nesterov'): UpdateDecl {
  const grad = 'let g = grad + params.weightDecay * param;';
  if (variant === 'plain') {
    // Without momentum PyTorch keeps no buffer: it is neither read nor written.
    return {
      name: 'sgdStep/plain',
      kernel: 'sgdStep',
      operands: [
        ['param', 'read_write'],
        ['grad', 'read'],
      ],
      layout: SGD_LAYOUT,
      body: `${grad}\n  param_out = param - params.lr * g;`,
    };
  }
  return {
    name: `sgdStep/${variant}`,
    kernel: 'sgdStep',
    operands: [
      ['param', 'read_write'],
      ['grad', 'read'],
      ['buf', 'read_write'],
    ],
    layout: SGD_LAYOUT,
    body: `${grad}
  buf_out = params.momentum * buf + params.oneMinusDampening * g;
  param_out = param - params.lr * ${variant === 'nesterov' ? '(g + params.momentum * buf_out)' : 'buf_out'};`,
  };
}

const SGD_PLAIN = sgdDecl('plain');
const SGD_MOMENTUM = sgdDecl('momentum');
const SGD_NESTEROV = sgdDecl('nesterov');

const sgdKernel = wgpuKernel(
  sgdStep,
  (encoder, { inputs, attrs }) => {
    const { lr, momentum, dampening, weightDecay, nesterov } = attrs;
    const values = { lr, momentum, oneMinusDampening: 1 - dampening, weightDecay };
    if (momentum === 0) {
      dispatchUpdate(encoder, SGD_PLAIN, [inputs[0]!, inputs[1]!], [], values);
      return;
    }
    dispatchUpdate(
      encoder,
      nesterov ? SGD_NESTEROV : SGD_MOMENTUM,
      [inputs[0]!, inputs[1]!, inputs[2]!],
      [],
      values,
    );
  },
  { dtypes: FLOAT },
);

// ---- clipByGlobalNorm ------------------------------------------------------------
//
// Three kinds of passes, all on the device: per gradient, a fixed number of
// workgroups write partial sums of squares into scratch; one workgroup sums
// the partials in a fixed order, writes the norm and puts the clip scale after
// the partials; per gradient, a scaling pass reads the scale from there.

/** Elements per workgroup before a gradient gets another one. */
const SUMSQ_ELEMENTS = 8 * WG * 4;
/** Most workgroups per gradient: enough to fill a GPU, few partials to sum. */
const SUMSQ_MAX_WORKGROUPS = 1024;

const SUMSQ_PARAMS = paramLayout([
  ['n', 'u32'],
  ['vecs', 'u32'],
  ['threads', 'u32'],
  ['base', 'u32'],
] as const);

const NORM_PARAMS = paramLayout([
  ['count', 'u32'],
  ['maxNorm', 'f32'],
  ['eps', 'f32'],
] as const);

const SCALE_LAYOUT = updateLayout([['at', 'u32']] as const);

/** Tree sum of `red[0..WG)` into `red[0]`. */
const TREE_SUM = `
  for (var s = ${WG / 2}u; s > 0u; s = s >> 1u) {
    workgroupBarrier();
    if (tid < s) { red[tid] += red[tid + s]; }
  }`;

/** `x`: how the tensor is stored; halves are read in u32 words (4 per vec2<u32>). */
function sumsqShader(kernel: string, vec: boolean, x: Storage = 'f32'): ShaderSource {
  const x4 = (i: string) => unpackQuad(x, `x4[${i}]`);
  const xs = (i: string) => loadScalar(x, 'xs', i);
  return {
    key: `optimizer/${kernel}/sumsq/${vec ? 'vec4' : 'scalar'}${x === 'f32' ? '' : `/${x}`}/wg${WG}`,
    kernel,
    code: () => {
      const module = new ShaderModule().params(SUMSQ_PARAMS);
      module.storage('xs', bindingType(x, false), 'read');
      module.storage('partials', 'f32', 'read_write');
      if (vec) module.storage('x4', quadType(x), 'read');
      module.workgroupArray('red', 'f32', WG);
      module.declare(halfFunctions(x));
      return module.build(
        undefined,
        WG,
        `  let tid = lid.x;
  let w = ${linearWorkgroup};
  let stride = params.threads;
  var i = w * ${WG}u + tid;
  var total = 0.0;
${
  vec
    ? `  // Four independent loads per step keep memory busy.
  var a0 = vec4<f32>(); var a1 = vec4<f32>(); var a2 = vec4<f32>(); var a3 = vec4<f32>();
  for (; i + 3u * stride < params.vecs; i += 4u * stride) {
    let x0 = ${x4('i')}; let x1 = ${x4('i + stride')}; let x2 = ${x4('i + 2u * stride')}; let x3 = ${x4('i + 3u * stride')};
    a0 += x0 * x0; a1 += x1 * x1; a2 += x2 * x2; a3 += x3 * x3;
  }
  for (; i < params.vecs; i += stride) { let x = ${x4('i')}; a0 += x * x; }
  let a = (a0 + a1) + (a2 + a3);
  total = (a.x + a.y) + (a.z + a.w);
  // The last n mod 4 elements.
  let tail = params.vecs * 4u + tid;
  if (w == 0u && tail < params.n) { let x = ${xs('tail')}; total += x * x; }`
    : `  for (; i < params.n; i += stride) { let x = ${xs('i')}; total += x * x; }`
}
  red[tid] = total;
${TREE_SUM}
  if (tid == 0u) { partials[params.base + w] = red[0]; }`,
      );
    },
  };
}

/** One workgroup: the norm from the partials; with `withScale` also the clip scale after the partials. */
const normShader = (kernel: string, withScale: boolean): ShaderSource => ({
  key: `optimizer/${kernel}/norm${withScale ? '-scale' : ''}/wg${WG}`,
  kernel,
  code: () => {
    const module = new ShaderModule().params(NORM_PARAMS);
    module.storage('partials', 'f32', 'read_write');
    module.storage('norm', 'f32', 'read_write');
    module.workgroupArray('red', 'f32', WG);
    return module.build(
      undefined,
      WG,
      `  let tid = lid.x;
  var total = 0.0;
  for (var i = tid; i < params.count; i += ${WG}u) { total += partials[i]; }
  red[tid] = total;
${TREE_SUM}
  if (tid == 0u) {
    let n = sqrt(red[0]);
    norm[0] = n;${
      withScale
        ? `
    // min(1, maxNorm / (norm + eps)), without dividing by a zero norm + eps.
    let denom = n + params.eps;
    partials[params.count] = select(1.0, params.maxNorm / denom, denom > params.maxNorm);`
        : ''
    }
  }`,
    );
  },
});

const SCALE: UpdateDecl = {
  name: 'clipByGlobalNorm/scale',
  kernel: 'clipByGlobalNorm',
  operands: [['x', 'read_write']],
  extra: ['clip'],
  layout: SCALE_LAYOUT,
  // Unclipped gradients stay as they are: no traffic, and few workgroups to start and end at once.
  prologue: 'let s = clip[params.at];\n  if (s == 1.0) { return; }',
  maxWorkgroups: 16384,
  body: 'x_out = x * s;',
};

/**
 * The sum-of-squares passes over `grads` and the norm pass into `norm`; the
 * partials live in scratch with one more word after them for the clip scale.
 * Returns that scratch and the number of partials.
 */
function encodeNorm(
  encoder: KernelEncoder,
  kernel: string,
  grads: readonly Operand[],
  norm: Operand,
  clip?: { maxNorm: number; eps: number },
): { partials: GPUBufferBinding; count: number } {
  const counts = grads.map((g) =>
    g.size === 0 ? 0 : Math.min(SUMSQ_MAX_WORKGROUPS, Math.ceil(g.size / SUMSQ_ELEMENTS)),
  );
  const count = counts.reduce((a, b) => a + b, 0);
  const bytes = (count + 1) * 4;
  const partials = { buffer: encoder.scratch(bytes), offset: 0, size: bytes };
  let base = 0;
  grads.forEach((g, j) => {
    const workgroups = counts[j]!;
    if (workgroups === 0) return;
    const vecs = Math.floor(g.size / 4);
    const vec = vecs > 0;
    encoder.dispatch({
      shader: sumsqShader(kernel, vec, storageOf(g.dtype)),
      buffers: vec
        ? [g, partials, { buffer: g.buffer, offset: g.offset, size: vecs * 4 * bytesPerElement(g.dtype) }]
        : [g, partials],
      params: { layout: SUMSQ_PARAMS, values: { n: g.size, vecs, threads: workgroups * WG, base } },
      workgroups: gridFor(workgroups, encoder.limits),
    });
    base += workgroups;
  });
  encoder.dispatch({
    shader: normShader(kernel, clip !== undefined),
    buffers: [partials, norm],
    params: { layout: NORM_PARAMS, values: { count, maxNorm: clip?.maxNorm ?? 0, eps: clip?.eps ?? 0 } },
    workgroups: [1],
  });
  return { partials, count };
}

const HALF_SCALE_PARAMS = paramLayout([
  ['n', 'u32'],
  ['at', 'u32'],
] as const);

/** The clip scale of a half gradient in place: one u32 word (two halves) per invocation, each rounded once. */
function halfScaleShader(dtype: 'f16' | 'bf16'): ShaderSource {
  return {
    key: `optimizer/clipByGlobalNorm/scale/${dtype}/wg${WG}`,
    kernel: 'clipByGlobalNorm',
    code: () => {
      const module = new ShaderModule();
      module.storage('x', 'u32', 'read_write');
      module.storage('clip', 'f32', 'read');
      declareHalf(module, dtype);
      return module.build(
        HALF_SCALE_PARAMS,
        WG,
        `  ${elementIndex('(params.n + 1u) / 2u')}
  let s = clip[params.at];
  if (s == 1.0) { return; }
  let w = x[i];
  let v = ${unpack2(dtype, 'w')} * s;
  let hi = select(w >> 16u, to_${dtype}(v.y), 2u * i + 1u < params.n);
  x[i] = to_${dtype}(v.x) | (hi << 16u);`,
      );
    },
  };
}

const clipKernel = wgpuKernel(
  clipByGlobalNorm,
  (encoder, { inputs, outputs, attrs }) => {
    const grads = inputs.map((g) => g!);
    const norm = outputs[outputs.length - 1]!;
    const { partials, count } = encodeNorm(encoder, 'clipByGlobalNorm', grads, norm, attrs);
    for (const g of grads) {
      if (!isHalf(g.dtype)) {
        dispatchUpdate(encoder, SCALE, [g], [partials], { at: count });
      } else if (g.size > 0) {
        encoder.dispatch({
          shader: halfScaleShader(g.dtype),
          buffers: [g, partials],
          params: { layout: HALF_SCALE_PARAMS, values: { n: g.size, at: count } },
          workgroups: elementGrid(encoder, Math.ceil(g.size / 2)),
        });
      }
    }
  },
  { dtypes: FLOAT },
);

const globalNormKernel = wgpuKernel(
  globalNorm,
  (encoder, { inputs, outputs }) => {
    encodeNorm(
      encoder,
      'globalNorm',
      inputs.map((x) => x!),
      outputs[0]!,
    );
  },
  { dtypes: FLOAT },
);

// ---- multiTensorAdamw ------------------------------------------------------------
//
// WebGPU has no pointers: each tensor's param, grad, m and v are four storage
// bindings, so one dispatch updates as many tensors as the device's
// maxStorageBuffersPerShaderStage leaves room for (after the device step, lr
// and norm), at most MULTI_SLOTS. Workgroup w updates chunk w − first of the
// tensor whose range of workgroups holds w; the shader has one loop per
// tensor, since a binding cannot be chosen at run time.

/** Elements per workgroup. */
export const MULTI_CHUNK = 4 * WG;
/** Most tensors per dispatch, wherever the binding limit is higher: keeps the shader small. */
export const MULTI_SLOTS = 64;

const MULTI_CONSTANTS = [...ADAMW_MOMENT_CONSTANTS, 'step', 'lr', 'maxNorm', 'clipEps'] as const;

/** Which per-step values the shader reads from device tensors. */
export interface MultiAdamwDevice {
  readonly step: boolean;
  readonly lr: boolean;
  readonly norm: boolean;
}

/** Tensors per dispatch on a device with `maxStorageBuffers` storage bindings per stage. */
export function multiAdamwSlots(maxStorageBuffers: number, device: MultiAdamwDevice): number {
  const extra = Number(device.step) + Number(device.lr) + Number(device.norm);
  return Math.min(MULTI_SLOTS, Math.floor((maxStorageBuffers - extra) / 4));
}

const multiLayouts = new Map<number, ParamLayout<string>>();

/** The constants, the workgroup count, then each tensor's size, first workgroup and weight decay. */
function multiLayout(slots: number): ParamLayout<string> {
  let layout = multiLayouts.get(slots);
  if (!layout) {
    const fields: [string, ParamType][] = [
      ...MULTI_CONSTANTS.map((name): [string, ParamType] => [name, 'f32']),
    ];
    fields.push(['workgroups', 'u32']);
    for (let s = 0; s < slots; s++) fields.push([`n${s}`, 'u32'], [`first${s}`, 'u32'], [`wd${s}`, 'f32']);
    layout = paramLayout(fields);
    multiLayouts.set(slots, layout);
  }
  return layout;
}

/** `grad`: how every gradient is stored (one dtype for all); halves are widened as read. */
export function multiAdamwShader(
  slots: number,
  device: MultiAdamwDevice,
  grad: Storage = 'f32',
): ShaderSource {
  const at = `${device.step ? '/step-at' : ''}${device.lr ? '/lr-at' : ''}${device.norm ? '/clip' : ''}`;
  const extra: [string, 'i32' | 'f32'][] = [];
  if (device.step) extra.push(['stepAt', 'i32']);
  if (device.lr) extra.push(['lrAt', 'f32']);
  if (device.norm) extra.push(['normAt', 'f32']);
  const tensors = Array.from({ length: slots }, (_, s) => s);
  return {
    key: `optimizer/multiTensorAdamw/slots${slots}/wg${WG}${at}${grad === 'f32' ? '' : `/grad-${grad}`}`,
    kernel: 'multiTensorAdamw',
    code: () => {
      const module = new ShaderModule().params(multiLayout(slots));
      for (const s of tensors) {
        module.storage(`p${s}`, 'f32', 'read_write');
        module.storage(`g${s}`, bindingType(grad, false), 'read');
        module.storage(`m${s}`, 'f32', 'read_write');
        module.storage(`v${s}`, 'f32', 'read_write');
      }
      for (const [name, type] of extra) module.storage(name, type, 'read');
      module.declare(EXPM1);
      module.declare(halfFunctions(grad));
      return module.build(
        undefined,
        WG,
        `  let w = ${linearWorkgroup};
  if (w >= params.workgroups) { return; }
  // The last tensor whose first workgroup is at most w.
  var slot = 0u;
  var first = params.first0;
  var n = params.n0;
  var wd = params.wd0;
${tensors
  .slice(1)
  .map(
    (s) =>
      `  if (w >= params.first${s}) { slot = ${s}u; first = params.first${s}; n = params.n${s}; wd = params.wd${s}; }`,
  )
  .join('\n')}
  let t = ${device.step ? 'f32(stepAt[0])' : 'params.step'};
  let lr = ${device.lr ? 'lrAt[0]' : 'params.lr'};
  let stepSize = lr / -expm1(t * params.logBeta1);
  let rootCorrection = 1.0 / sqrt(-expm1(t * params.logBeta2));
  let decay = 1.0 - lr * wd;
  ${
    device.norm
      ? `// min(1, maxNorm / (norm + clipEps)), without dividing by a zero norm + clipEps.
  let denom = normAt[0] + params.clipEps;
  let scale = select(1.0, params.maxNorm / denom, denom > params.maxNorm);`
      : ''
  }
  let start = (w - first) * ${MULTI_CHUNK}u;
  let end = min(n, start + ${MULTI_CHUNK}u);
  switch slot {
${tensors
  .map(
    (s) => `    case ${s}u: {
      for (var i = start + lid.x; i < end; i += ${WG}u) {
        let g = ${loadScalar(grad, `g${s}`, 'i')}${device.norm ? ' * scale' : ''};
        let m = params.beta1 * m${s}[i] + params.oneMinusBeta1 * g;
        let v = params.beta2 * v${s}[i] + params.oneMinusBeta2 * g * g;
        m${s}[i] = m;
        v${s}[i] = v;
        p${s}[i] = p${s}[i] * decay - stepSize * m / (sqrt(v) * rootCorrection + params.eps);
      }
    }`,
  )
  .join('\n')}
    default: {}
  }`,
      );
    },
  };
}

const multiAdamwKernel = wgpuKernel(
  multiTensorAdamw,
  (encoder, { inputs, attrs }) => {
    const [stepAt, lrAt, normAt] = inputs;
    const device = { step: stepAt !== undefined, lr: lrAt !== undefined, norm: normAt !== undefined };
    const maxBuffers = encoder.limits.maxStorageBuffersPerShaderStage;
    const slots = multiAdamwSlots(maxBuffers, device);
    if (slots < 1) {
      throw new UnsupportedOnBackendError('the device binds too few storage buffers per shader stage', {
        operation: 'multiTensorAdamw',
        argument: 'tensors',
        expected: `maxStorageBuffersPerShaderStage >= ${4 + Number(device.step) + Number(device.lr) + Number(device.norm)}`,
        actual: String(maxBuffers),
      });
    }
    const { weightDecay } = attrs;
    const base: Record<string, number> = {
      ...adamwMomentConstants(attrs),
      step: attrs.step,
      lr: attrs.lr,
      maxNorm: attrs.maxNorm,
      clipEps: attrs.clipEps,
    };
    const tensors = inputs.slice(3).map((t) => t!);
    const grad = storageOf(tensors[1]?.dtype ?? 'f32');
    // Empty tensors have nothing to update and cannot be bound.
    const live = Array.from({ length: tensors.length / 4 }, (_, j) => j).filter(
      (j) => tensors[4 * j]!.size > 0,
    );
    const dispatches = Math.ceil(live.length / slots);
    // As even as possible, so that one pipeline serves every dispatch.
    const per = Math.ceil(live.length / Math.max(1, dispatches));
    for (let from = 0; from < live.length; from += per) {
      const group = live.slice(from, from + per);
      const values = { ...base };
      let workgroups = 0;
      group.forEach((j, s) => {
        values[`n${s}`] = tensors[4 * j]!.size;
        values[`first${s}`] = workgroups;
        values[`wd${s}`] = weightDecay.length === 1 ? weightDecay[0]! : weightDecay[j]!;
        workgroups += Math.ceil(tensors[4 * j]!.size / MULTI_CHUNK);
      });
      values.workgroups = workgroups;
      encoder.dispatch({
        shader: multiAdamwShader(group.length, device, grad),
        buffers: [
          ...group.flatMap((j) => tensors.slice(4 * j, 4 * j + 4)),
          ...[stepAt, lrAt, normAt].filter((t) => t !== undefined),
        ],
        params: { layout: multiLayout(group.length), values },
        workgroups: gridFor(workgroups, encoder.limits),
      });
    }
  },
  { dtypes: FLOAT },
);

export const OPTIMIZER_KERNELS: readonly AnyWgpuKernel[] = [
  adamwKernel,
  sgdKernel,
  clipKernel,
  globalNormKernel,
  multiAdamwKernel,
];
