import { adamwStep, clipByGlobalNorm, sgdStep } from '@rayo/core';
import {
  type AnyCudaKernel,
  cudaKernel,
  type KernelEncoder,
  type LaunchValue,
  type Operand,
} from '../kernel.js';
import type { KernelBuilder } from '../ptx/kernel.js';
import { PtxModule } from '../ptx/module.js';
import type { F32, Param, R32, R64 } from '../ptx/operands.js';
import type { ParamType } from '../ptx/types.js';
import { BLOCK, checkElementCount, gridFor, loadPointer, loadU32 } from './common.js';
import { expF32, keepNaN } from './math.js';
import { accessWidth, GroupReducer, groupPlace, loadFloats, storeFloats } from './rowReduce.js';

// Optimizer steps stream every element once: f32 moves as `.v4` where every
// operand is 16-byte aligned (the pool's allocations are), and the per-step
// constants (bias corrections, 1 − β) are computed once per launch on the
// host in double precision, never per element on the device.

/** Elements per access. */
export type VectorWidth = 1 | 2 | 4;

/** The widest access all operands' alignment allows; the loops handle any n mod width themselves. */
export function vectorWidthFor(operands: readonly Operand[]): VectorWidth {
  return accessWidth(4, operands);
}

/**
 * Runs `body` over the elements [0, n): a grid-stride loop over whole groups
 * of `width`, then the last n mod width elements, one per thread.
 */
function vectorLoop(
  k: KernelBuilder,
  n: R32,
  width: VectorWidth,
  body: (index: R32, width: VectorWidth) => void,
): void {
  if (width === 1) {
    k.gridStrideLoop(n, (i) => body(i, 1));
    return;
  }
  const shift = Math.log2(width);
  const groups = k.shr('u32', k.reg('u32'), n, shift);
  k.gridStrideLoop(groups, (g) => body(k.shl('b32', k.reg('u32'), g, shift), width));
  const tail = k.shl('b32', k.reg('u32'), groups, shift);
  k.add('u32', tail, tail, k.globalThreadIndex('x'));
  k.guard(tail, n, () => body(tail, 1));
}

/** Blocks of a grid-stride launch over `n` elements at `width` per access. */
function vectorGrid(encoder: KernelEncoder, n: number, width: VectorWidth): number {
  return gridFor(encoder.device, Math.ceil(n / width));
}

function load(k: KernelBuilder, base: R64, index: R32, width: VectorWidth): F32[] {
  return loadFloats(k, k.elementAddress(base, index, 4), width);
}

function store(k: KernelBuilder, base: R64, index: R32, values: readonly F32[]): void {
  storeFloats(k, k.elementAddress(base, index, 4), values);
}

/** IEEE round-to-nearest f32 arithmetic, each result in a fresh register. */
function arithmetic(k: KernelBuilder) {
  const f = () => k.reg('f32');
  type In = F32 | number;
  return {
    mul: (a: F32, b: In) => k.mul('f32', f(), a, b, { rnd: 'rn' }),
    fma: (a: In, b: In, c: In) => k.fma('f32', f(), a, b, c),
    div: (a: F32, b: F32) => k.div('f32', f(), a, b, 'rn'),
    neg: (a: F32) => k.neg('f32', f(), a),
  };
}

function f32Params(
  k: KernelBuilder,
  p: Readonly<Record<string, Param<ParamType>>>,
  names: readonly string[],
): Record<string, F32> {
  return Object.fromEntries(names.map((name) => [name, k.ldParam(p[name] as Param<'f32'>)]));
}

/** The block's sum of `value`, in every thread, combined in a fixed order (deterministic). */
function blockSum(k: KernelBuilder, value: F32): F32 {
  const place = groupPlace(k, { threads: BLOCK, block: BLOCK, width: 1, slots: 0 });
  return new GroupReducer(k, place).reduce(['sum'], [value])[0]!;
}

function isThreadZero(k: KernelBuilder) {
  return k.setp('eq', 'u32', k.reg('pred'), k.tid('x'), 0);
}

// ---- AdamW -------------------------------------------------------------------

const ADAMW_CONSTANTS = [
  'beta1',
  'oneMinusBeta1',
  'beta2',
  'oneMinusBeta2',
  'stepSize',
  'invSqrtBc2',
  'eps',
  'decay',
];

/** Which per-step values the kernel reads from device tensors. */
export interface AdamwDeviceInputs {
  readonly step: boolean;
  readonly lr: boolean;
}

const ON_HOST: AdamwDeviceInputs = { step: false, lr: false };

export function adamwKey(width: VectorWidth, device: AdamwDeviceInputs = ON_HOST): string {
  const at = `${device.step ? '/step-at' : ''}${device.lr ? '/lr-at' : ''}`;
  return `optimizer/adamwStep/v${width}${at}`;
}

/** The launch parameters of a kernel whose step or lr is on the device: their inputs to the constants. */
const ADAMW_DEVICE_CONSTANTS = [
  'beta1',
  'oneMinusBeta1',
  'beta2',
  'oneMinusBeta2',
  'logBeta1',
  'logBeta2',
  'eps',
  'weightDecay',
  'step',
  'lr',
];

/** e^x − 1 for x ≤ 0: the series (8 terms, below 1e-10 relative) where |x| < 1/4, where 1 − e^x would cancel; else e^x − 1. */
function expm1(k: KernelBuilder, x: F32): F32 {
  const { fma } = arithmetic(k);
  let poly: F32 | number = 1 / 40320;
  for (const c of [1 / 5040, 1 / 720, 1 / 120, 1 / 24, 1 / 6, 1 / 2, 1]) {
    poly = fma(x, poly as F32, c);
  }
  const series = k.mul('f32', k.reg('f32'), x, poly as F32, { rnd: 'rn' });
  const direct = k.sub('f32', k.reg('f32'), expF32(k, x), 1, { rnd: 'rn' });
  const small = k.setp('lt', 'f32', k.reg('pred'), k.abs('f32', k.reg('f32'), x), 0.25);
  return k.selp('f32', k.reg('f32'), series, direct, small);
}

/**
 * The per-launch constants from a step and lr read on the device, once per
 * thread before the loop: 1 − β^t = −expm1(t·ln β), ln β from the host in f64.
 */
function deviceConstants(
  k: KernelBuilder,
  p: Readonly<Record<string, Param<ParamType>>>,
  device: AdamwDeviceInputs,
): Record<string, F32> {
  const c = f32Params(k, p, ADAMW_DEVICE_CONSTANTS);
  const { mul, fma, div, neg } = arithmetic(k);
  let t = c.step!;
  if (device.step) {
    const at = k.ldGlobal('s32', k.reg('s32'), loadPointer(k, p, 'stepAt'));
    t = k.cvt('f32', 's32', k.reg('f32'), at, { rnd: 'rn' });
  }
  let lr = c.lr!;
  if (device.lr) lr = k.ldGlobal('f32', k.reg('f32'), loadPointer(k, p, 'lrAt'));
  const bc1 = neg(expm1(k, mul(t, c.logBeta1!)));
  const bc2 = neg(expm1(k, mul(t, c.logBeta2!)));
  const one = k.mov('f32', k.reg('f32'), 1);
  return {
    ...c,
    stepSize: div(lr, bc1),
    invSqrtBc2: div(one, k.sqrt(k.reg('f32'), bc2)),
    decay: fma(neg(lr), c.weightDecay!, 1),
  };
}

/**
 * m ← β1·m + (1−β1)·g, v ← β2·v + (1−β2)·g², then
 * p ← p·(1 − lr·wd) − (lr/bc1)·m / (√v/√bc2 + eps): PyTorch's order of operations.
 */
export function adamwModule(width: VectorWidth, device: AdamwDeviceInputs = ON_HOST): PtxModule {
  const params: Record<string, ParamType> = { param: 'ptr', grad: 'ptr', m: 'ptr', v: 'ptr', n: 'u32' };
  const onDevice = device.step || device.lr;
  for (const name of onDevice ? ADAMW_DEVICE_CONSTANTS : ADAMW_CONSTANTS) params[name] = 'f32';
  if (device.step) params.stepAt = 'ptr';
  if (device.lr) params.lrAt = 'ptr';
  const m = new PtxModule();
  m.entry(
    'adamw_step',
    params,
    (k, p: Readonly<Record<string, Param<ParamType>>>) => {
      const [param, grad, mom, vel] = ['param', 'grad', 'm', 'v'].map((name) => loadPointer(k, p, name));
      const c = onDevice ? deviceConstants(k, p, device) : f32Params(k, p, ADAMW_CONSTANTS);
      const { mul, fma, div, neg } = arithmetic(k);
      vectorLoop(k, loadU32(k, p, 'n'), width, (i, w) => {
        const g = load(k, grad!, i, w);
        const m0 = load(k, mom!, i, w);
        const v0 = load(k, vel!, i, w);
        const p0 = load(k, param!, i, w);
        const m1 = g.map((gj, j) => fma(c.beta1!, m0[j]!, mul(c.oneMinusBeta1!, gj)));
        const v1 = g.map((gj, j) => fma(c.beta2!, v0[j]!, mul(mul(c.oneMinusBeta2!, gj), gj)));
        const p1 = p0.map((pj, j) => {
          const denom = fma(k.sqrt(k.reg('f32'), v1[j]!), c.invSqrtBc2!, c.eps!);
          return fma(pj, c.decay!, neg(div(mul(c.stepSize!, m1[j]!), denom)));
        });
        store(k, param!, i, p1);
        store(k, mom!, i, m1);
        store(k, vel!, i, v1);
      });
    },
    { maxThreadsPerBlock: BLOCK },
  );
  return m;
}

/** The per-launch constants of an AdamW step, in double precision (rounded once to f32 at the launch). */
export function adamwConstants(attrs: {
  lr: number;
  beta1: number;
  beta2: number;
  eps: number;
  weightDecay: number;
  step: number;
}): Record<string, number> {
  const { lr, beta1, beta2, eps, weightDecay, step } = attrs;
  const bc1 = 1 - beta1 ** step;
  const bc2 = 1 - beta2 ** step;
  return {
    beta1,
    oneMinusBeta1: 1 - beta1,
    beta2,
    oneMinusBeta2: 1 - beta2,
    stepSize: lr / bc1,
    invSqrtBc2: 1 / Math.sqrt(bc2),
    eps,
    decay: 1 - lr * weightDecay,
  };
}

/** The launch parameters of a kernel that reads the step or lr on the device (the other one from `attrs`). */
export function adamwDeviceConstants(attrs: {
  lr: number;
  beta1: number;
  beta2: number;
  eps: number;
  weightDecay: number;
  step: number;
}): Record<string, number> {
  const { lr, beta1, beta2, eps, weightDecay, step } = attrs;
  return {
    beta1,
    oneMinusBeta1: 1 - beta1,
    beta2,
    oneMinusBeta2: 1 - beta2,
    // ln 0 is −∞; a large finite value makes e^(t·ln β) 0, as β^t is.
    logBeta1: beta1 === 0 ? -1e30 : Math.log(beta1),
    logBeta2: beta2 === 0 ? -1e30 : Math.log(beta2),
    eps,
    weightDecay,
    step,
    lr,
  };
}

const adamwKernel = cudaKernel(adamwStep, (encoder, { inputs, attrs }) => {
  const [param, grad, m, v, stepAt, lrAt] = inputs as (Operand | undefined)[];
  const n = param!.size;
  if (n === 0) return;
  checkElementCount('adamwStep', 'param', n);
  const width = vectorWidthFor([param!, grad!, m!, v!]);
  const device = { step: stepAt !== undefined, lr: lrAt !== undefined };
  const onDevice = device.step || device.lr;
  encoder.launch({
    key: adamwKey(width, device),
    module: () => adamwModule(width, device),
    entry: 'adamw_step',
    grid: vectorGrid(encoder, n, width),
    block: BLOCK,
    args: {
      param: param!,
      grad: grad!,
      m: m!,
      v: v!,
      n,
      ...(onDevice ? adamwDeviceConstants(attrs) : adamwConstants(attrs)),
      ...(stepAt ? { stepAt } : {}),
      ...(lrAt ? { lrAt } : {}),
    },
  });
});

// ---- SGD ---------------------------------------------------------------------

/** Plain SGD keeps no buffer; Nesterov steps along g + μ·b instead of b. */
export type SgdMode = 'plain' | 'momentum' | 'nesterov';

export function sgdMode(attrs: { momentum: number; nesterov: boolean }): SgdMode {
  return attrs.momentum === 0 ? 'plain' : attrs.nesterov ? 'nesterov' : 'momentum';
}

export function sgdKey(mode: SgdMode, width: VectorWidth): string {
  return `optimizer/sgdStep/${mode}/v${width}`;
}

function sgdConstantNames(mode: SgdMode): string[] {
  return mode === 'plain' ? ['lr', 'weightDecay'] : ['lr', 'weightDecay', 'momentum', 'oneMinusDampening'];
}

/**
 * g ← grad + wd·p; with momentum b ← μ·b + (1 − dampening)·g and the step
 * along b (Nesterov: g + μ·b); p ← p − lr·step.
 */
export function sgdModule(mode: SgdMode, width: VectorWidth): PtxModule {
  const params: Record<string, ParamType> = { param: 'ptr', grad: 'ptr' };
  if (mode !== 'plain') params.buf = 'ptr';
  params.n = 'u32';
  const constants = sgdConstantNames(mode);
  for (const name of constants) params[name] = 'f32';
  const m = new PtxModule();
  m.entry(
    `sgd_${mode}`,
    params,
    (k, p: Readonly<Record<string, Param<ParamType>>>) => {
      const param = loadPointer(k, p, 'param');
      const grad = loadPointer(k, p, 'grad');
      const buf = mode === 'plain' ? undefined : loadPointer(k, p, 'buf');
      const c = f32Params(k, p, constants);
      const { mul, fma, neg } = arithmetic(k);
      const negLr = neg(c.lr!);
      vectorLoop(k, loadU32(k, p, 'n'), width, (i, w) => {
        const p0 = load(k, param, i, w);
        const g = load(k, grad, i, w).map((gj, j) => fma(c.weightDecay!, p0[j]!, gj));
        let step = g;
        if (buf) {
          const b0 = load(k, buf, i, w);
          const b1 = g.map((gj, j) => fma(c.momentum!, b0[j]!, mul(c.oneMinusDampening!, gj)));
          store(k, buf, i, b1);
          step = mode === 'nesterov' ? b1.map((bj, j) => fma(c.momentum!, bj, g[j]!)) : b1;
        }
        store(
          k,
          param,
          i,
          p0.map((pj, j) => fma(negLr, step[j]!, pj)),
        );
      });
    },
    { maxThreadsPerBlock: BLOCK },
  );
  return m;
}

const sgdKernel = cudaKernel(sgdStep, (encoder, { inputs, attrs }) => {
  const [param, grad, buf] = inputs as Operand[];
  const n = param!.size;
  if (n === 0) return;
  checkElementCount('sgdStep', 'param', n);
  const mode = sgdMode(attrs);
  const args: Record<string, LaunchValue> = {
    param: param!,
    grad: grad!,
    n,
    lr: attrs.lr,
    weightDecay: attrs.weightDecay,
  };
  // Without momentum the buffer is neither read nor written.
  if (mode !== 'plain') {
    Object.assign(args, { buf: buf!, momentum: attrs.momentum, oneMinusDampening: 1 - attrs.dampening });
  }
  const width = vectorWidthFor(mode === 'plain' ? [param!, grad!] : [param!, grad!, buf!]);
  encoder.launch({
    key: sgdKey(mode, width),
    module: () => sgdModule(mode, width),
    entry: `sgd_${mode}`,
    grid: vectorGrid(encoder, n, width),
    block: BLOCK,
    args,
  });
});

// ---- clip by global norm -------------------------------------------------------

/**
 * Gradients per launch, each a pointer and a length parameter: a model's
 * few hundred tensors take a few launches per pass rather than one each.
 */
export const CLIP_SLOTS = 16;

export function clipSumSquaresKey(slots: number, width: VectorWidth): string {
  return `optimizer/clipByGlobalNorm/sumSquares/slots${slots}/v${width}`;
}

export function clipScaleKey(slots: number, width: VectorWidth): string {
  return `optimizer/clipByGlobalNorm/scale/slots${slots}/v${width}`;
}

export const CLIP_NORM_KEY = `optimizer/clipByGlobalNorm/norm/block${BLOCK}`;

function slotParams(slots: number): Record<string, ParamType> {
  const params: Record<string, ParamType> = {};
  for (let s = 0; s < slots; s++) {
    params[`g${s}`] = 'ptr';
    params[`n${s}`] = 'u32';
  }
  return params;
}

/** Runs `body` over every element of every slot's gradient. */
function forEachSlotElement(
  k: KernelBuilder,
  p: Readonly<Record<string, Param<ParamType>>>,
  slots: number,
  width: VectorWidth,
  body: (g: R64, index: R32, width: VectorWidth) => void,
): void {
  for (let s = 0; s < slots; s++) {
    const g = loadPointer(k, p, `g${s}`);
    vectorLoop(k, loadU32(k, p, `n${s}`), width, (i, w) => body(g, i, w));
  }
}

/**
 * Pass 1: block b writes partials[b], its sum of squares over the slots'
 * elements. Which thread adds which element depends only on the grid, and
 * the block combines in a fixed order, so the norm is deterministic.
 */
export function clipSumSquaresModule(slots: number, width: VectorWidth): PtxModule {
  const m = new PtxModule();
  m.entry(
    'clip_sum_squares',
    { partials: 'ptr', ...slotParams(slots) },
    (k, p: Readonly<Record<string, Param<ParamType>>>) => {
      const acc = k.mov('f32', k.reg('f32'), 0);
      forEachSlotElement(k, p, slots, width, (g, i, w) => {
        for (const x of load(k, g, i, w)) k.fma('f32', acc, x, x, acc);
      });
      const total = blockSum(k, acc);
      k.ifThen(isThreadZero(k), () => {
        k.stGlobal('f32', k.elementAddress(loadPointer(k, p, 'partials'), k.ctaid('x'), 4), total);
      });
    },
    { requiredThreadsPerBlock: BLOCK },
  );
  return m;
}

/**
 * Pass 2, one block: norm = √(Σ partials) and scale = min(1, maxNorm / (norm + eps)),
 * NaN kept (min.f32 would drop it): a NaN gradient makes every gradient NaN, as in the reference.
 */
export function clipNormModule(): PtxModule {
  const m = new PtxModule();
  m.entry(
    'clip_norm',
    { partials: 'ptr', count: 'u32', norm: 'ptr', scale: 'ptr', maxNorm: 'f32', eps: 'f32' },
    (k, p) => {
      const partials = k.globalPointer(p.partials);
      const count = k.ldParam(p.count);
      const acc = k.mov('f32', k.reg('f32'), 0);
      const i = k.reg('u32');
      k.forRange(i, k.tid('x'), count, BLOCK, () => {
        const partial = k.ldGlobal('f32', k.reg('f32'), k.elementAddress(partials, i, 4));
        k.add('f32', acc, acc, partial, { rnd: 'rn' });
      });
      const total = blockSum(k, acc);
      k.ifThen(isThreadZero(k), () => {
        const norm = k.sqrt(k.reg('f32'), total);
        k.stGlobal('f32', k.globalPointer(p.norm), norm);
        const denom = k.add('f32', k.reg('f32'), norm, k.ldParam(p.eps), { rnd: 'rn' });
        const ratio = k.div('f32', k.reg('f32'), k.ldParam(p.maxNorm), denom, 'rn');
        k.stGlobal('f32', k.globalPointer(p.scale), keepNaN(k, ratio, k.min('f32', k.reg('f32'), ratio, 1)));
      });
    },
    { requiredThreadsPerBlock: BLOCK },
  );
  return m;
}

/** Pass 3: g ← g · scale, skipped where scale is exactly 1 (nothing would change), the usual case. */
export function clipScaleModule(slots: number, width: VectorWidth): PtxModule {
  const m = new PtxModule();
  m.entry(
    'clip_scale',
    { scale: 'ptr', ...slotParams(slots) },
    (k, p: Readonly<Record<string, Param<ParamType>>>) => {
      const scale = k.ldGlobal('f32', k.reg('f32'), loadPointer(k, p, 'scale'));
      const { mul } = arithmetic(k);
      k.ifThen(k.setp('neu', 'f32', k.reg('pred'), scale, 1), () => {
        forEachSlotElement(k, p, slots, width, (g, i, w) => {
          store(
            k,
            g,
            i,
            load(k, g, i, w).map((x) => mul(x, scale)),
          );
        });
      });
    },
    { maxThreadsPerBlock: BLOCK },
  );
  return m;
}

/** One launch's gradients: at most CLIP_SLOTS, sharing a vector width. */
export interface ClipGroup {
  readonly grads: readonly Operand[];
  readonly width: VectorWidth;
  readonly elements: number;
}

/**
 * Groups of at most CLIP_SLOTS gradients that share a vector width, empty
 * ones dropped. With `distinct`, a tensor listed twice appears once: the
 * norm counts it twice (as the reference does), but in place it is one
 * tensor, to be scaled once.
 */
export function clipGroups(grads: readonly Operand[], distinct: boolean): ClipGroup[] {
  const seen = new Set<bigint>();
  const byWidth = new Map<VectorWidth, Operand[]>();
  for (const g of grads) {
    if (g.size === 0 || (distinct && seen.has(g.ptr))) continue;
    seen.add(g.ptr);
    const width = vectorWidthFor([g]);
    byWidth.set(width, [...(byWidth.get(width) ?? []), g]);
  }
  const groups: ClipGroup[] = [];
  for (const width of [4, 2, 1] as const) {
    const list = byWidth.get(width) ?? [];
    for (let i = 0; i < list.length; i += CLIP_SLOTS) {
      const part = list.slice(i, i + CLIP_SLOTS);
      groups.push({ grads: part, width, elements: part.reduce((sum, g) => sum + g.size, 0) });
    }
  }
  return groups;
}

function slotArgs(grads: readonly Operand[]): Record<string, LaunchValue> {
  const args: Record<string, LaunchValue> = {};
  grads.forEach((g, s) => {
    args[`g${s}`] = g;
    args[`n${s}`] = g.size;
  });
  return args;
}

const clipKernel = cudaKernel(clipByGlobalNorm, (encoder, { inputs, outputs, attrs }) => {
  const grads = inputs as Operand[];
  const norm = outputs[outputs.length - 1]!;
  grads.forEach((g, i) => {
    checkElementCount('clipByGlobalNorm', `grads[${i}]`, g.size);
  });
  const sums = clipGroups(grads, false).map((group) => ({
    group,
    blocks: vectorGrid(encoder, group.elements, group.width),
  }));
  const partialCount = sums.reduce((total, s) => total + s.blocks, 0);
  // The partials, then the scale: the norm and scale never leave the device.
  const partials = encoder.scratch(4 * (partialCount + 1));
  const scale = partials + BigInt(4 * partialCount);
  let offset = 0;
  for (const { group, blocks } of sums) {
    const slots = group.grads.length;
    encoder.launch({
      key: clipSumSquaresKey(slots, group.width),
      module: () => clipSumSquaresModule(slots, group.width),
      entry: 'clip_sum_squares',
      grid: blocks,
      block: BLOCK,
      args: { partials: partials + BigInt(4 * offset), ...slotArgs(group.grads) },
    });
    offset += blocks;
  }
  encoder.launch({
    key: CLIP_NORM_KEY,
    module: clipNormModule,
    entry: 'clip_norm',
    grid: 1,
    block: BLOCK,
    args: { partials, count: partialCount, norm, scale, maxNorm: attrs.maxNorm, eps: attrs.eps },
  });
  for (const group of clipGroups(grads, true)) {
    const slots = group.grads.length;
    encoder.launch({
      key: clipScaleKey(slots, group.width),
      module: () => clipScaleModule(slots, group.width),
      entry: 'clip_scale',
      grid: vectorGrid(encoder, group.elements, group.width),
      block: BLOCK,
      args: { scale, ...slotArgs(group.grads) },
    });
  }
});

export const OPTIMIZER_KERNELS: readonly AnyCudaKernel[] = [adamwKernel, sgdKernel, clipKernel];
