import {
  ADAMW_MOMENT_CONSTANTS,
  type AdamwValues,
  adamwMomentConstants,
  adamwStep,
  FLOAT,
  MULTI_ADAMW_FIXED,
  multiTensorAdamw,
  sgdStep,
} from '@rayo/core';
import { type AnyCudaKernel, cudaKernel, type LaunchValue, launchArgs, type Operand } from '../kernel.js';
import type { KernelBuilder } from '../ptx/kernel.js';
import { PtxModule } from '../ptx/module.js';
import type { F32, Param, R32, R64 } from '../ptx/operands.js';
import type { ParamType } from '../ptx/types.js';
import { clipKernel, clipScale, globalNormKernel } from './clipByGlobalNorm.js';
import { BLOCK, checkElementCount, loadPointer, loadU32 } from './common.js';
import { expF32 } from './math.js';
import {
  arithmetic,
  f32Params,
  load,
  loadTyped,
  store,
  type VectorWidth,
  vectorGrid,
  vectorLoop,
  vectorWidthFor,
} from './optimizerLoops.js';
import { lossScaleKernel } from './optimizerLossScale.js';
import { type FloatStorage, storageKey, storageOf } from './storage.js';

// Optimizer steps: AdamW and SGD over one tensor, AdamW over many tensors at
// once, and (in clipByGlobalNorm.ts) clipping by the gradients' global norm.

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

export function adamwKey(
  width: VectorWidth,
  device: AdamwDeviceInputs = ON_HOST,
  grad: FloatStorage = 'f32',
): string {
  const at = `${device.step ? '/step-at' : ''}${device.lr ? '/lr-at' : ''}`;
  return `optimizer/adamwStep/v${width}${at}${storageKey([grad])}`;
}

/** The launch parameters of a kernel whose step or lr is on the device: their inputs to the constants. */
const ADAMW_DEVICE_CONSTANTS = [...ADAMW_MOMENT_CONSTANTS, 'weightDecay', 'step', 'lr'];

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
  const { fma, neg } = arithmetic(k);
  const { lr, ...corrections } = stepConstants(k, p, c, device);
  return { ...c, ...corrections, decay: fma(neg(lr), c.weightDecay!, 1) };
}

/** The learning rate and the bias-correction factors, with t and lr from the device or from `c`. */
function stepConstants(
  k: KernelBuilder,
  p: Readonly<Record<string, Param<ParamType>>>,
  c: Readonly<Record<string, F32>>,
  device: AdamwDeviceInputs,
): { lr: F32; stepSize: F32; invSqrtBc2: F32 } {
  const { mul, div, neg } = arithmetic(k);
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
  return { lr, stepSize: div(lr, bc1), invSqrtBc2: div(one, k.sqrt(k.reg('f32'), bc2)) };
}

/**
 * The AdamW update of `width` elements at `i`:
 * m ← β1·m + (1−β1)·g, v ← β2·v + (1−β2)·g², then
 * p ← p·(1 − lr·wd) − (lr/bc1)·m / (√v/√bc2 + eps): PyTorch's order of operations.
 * `gradScale` multiplies g first (the clip factor).
 */
function adamwElements(
  k: KernelBuilder,
  [param, grad, mom, vel]: readonly R64[],
  c: Readonly<Record<string, F32>>,
  i: R32,
  w: VectorWidth,
  gradType: FloatStorage,
  gradScale?: F32,
): void {
  const { mul, fma, div, neg } = arithmetic(k);
  const raw = loadTyped(k, gradType, grad!, i, w);
  const g = gradScale ? raw.map((x) => mul(x, gradScale)) : raw;
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
}

/** One AdamW update of one tensor (`adamwElements`). */
export function adamwModule(
  width: VectorWidth,
  device: AdamwDeviceInputs = ON_HOST,
  gradType: FloatStorage = 'f32',
): PtxModule {
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
      const ptrs = ['param', 'grad', 'm', 'v'].map((name) => loadPointer(k, p, name));
      const c = onDevice ? deviceConstants(k, p, device) : f32Params(k, p, ADAMW_CONSTANTS);
      vectorLoop(k, loadU32(k, p, 'n'), width, (i, w) => adamwElements(k, ptrs, c, i, w, gradType));
    },
    { maxThreadsPerBlock: BLOCK },
  );
  return m;
}

/** The per-launch constants of an AdamW step, in double precision (rounded once to f32 at the launch). */
export function adamwConstants(attrs: AdamwValues): Record<string, number> {
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
export function adamwDeviceConstants(attrs: AdamwValues): Record<string, number> {
  const { lr, weightDecay, step } = attrs;
  return { ...adamwMomentConstants(attrs), weightDecay, step, lr };
}

const adamwKernel = cudaKernel(
  adamwStep,
  (encoder, { inputs, attrs }) => {
    const [param, grad, m, v, stepAt, lrAt] = inputs as (Operand | undefined)[];
    const n = param!.size;
    if (n === 0) return;
    checkElementCount('adamwStep', 'param', n);
    const width = vectorWidthFor([param!, grad!, m!, v!]);
    const device = { step: stepAt !== undefined, lr: lrAt !== undefined };
    const onDevice = device.step || device.lr;
    const gradType = storageOf(grad!);
    encoder.launch({
      key: adamwKey(width, device, gradType),
      module: () => adamwModule(width, device, gradType),
      entry: 'adamw_step',
      grid: vectorGrid(encoder, n, width),
      block: BLOCK,
      args: launchArgs(
        { param: param!, grad: grad!, m: m!, v: v!, n },
        onDevice ? adamwDeviceConstants(attrs) : adamwConstants(attrs),
        stepAt ? { stepAt } : {},
        lrAt ? { lrAt } : {},
      ),
    });
  },
  { dtypes: FLOAT },
);

// ---- SGD ---------------------------------------------------------------------

/** Plain SGD keeps no buffer; Nesterov steps along g + μ·b instead of b. */
export type SgdMode = 'plain' | 'momentum' | 'nesterov';

export function sgdMode(attrs: { momentum: number; nesterov: boolean }): SgdMode {
  return attrs.momentum === 0 ? 'plain' : attrs.nesterov ? 'nesterov' : 'momentum';
}

export function sgdKey(mode: SgdMode, width: VectorWidth, grad: FloatStorage = 'f32'): string {
  return `optimizer/sgdStep/${mode}/v${width}${storageKey([grad])}`;
}

function sgdConstantNames(mode: SgdMode): string[] {
  return mode === 'plain' ? ['lr', 'weightDecay'] : ['lr', 'weightDecay', 'momentum', 'oneMinusDampening'];
}

/**
 * g ← grad + wd·p; with momentum b ← μ·b + (1 − dampening)·g and the step
 * along b (Nesterov: g + μ·b); p ← p − lr·step.
 */
export function sgdModule(mode: SgdMode, width: VectorWidth, gradType: FloatStorage = 'f32'): PtxModule {
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
        const g = loadTyped(k, gradType, grad, i, w).map((gj, j) => fma(c.weightDecay!, p0[j]!, gj));
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

const sgdKernel = cudaKernel(
  sgdStep,
  (encoder, { inputs, attrs }) => {
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
    const gradType = storageOf(grad!);
    encoder.launch({
      key: sgdKey(mode, width, gradType),
      module: () => sgdModule(mode, width, gradType),
      entry: `sgd_${mode}`,
      grid: vectorGrid(encoder, n, width),
      block: BLOCK,
      args,
    });
  },
  { dtypes: FLOAT },
);

// ---- AdamW over many tensors ----------------------------------------------------
//
// One launch updates up to MULTI_ADAMW_SLOTS tensors: their pointers, sizes,
// first blocks and weight decays are kernel parameters (CUDA passes at most
// 4096 bytes of them), and block b updates chunk b − first of the tensor whose
// range of blocks holds b, found by a binary search unrolled over the slots.
// More tensors, or tensors of different alignments, take more launches.

/** Elements per block: a multiple of every vector width, so that only a tensor's last chunk has a tail. */
export const MULTI_ADAMW_CHUNK = 16 * BLOCK;

/** Bytes of kernel parameters a launch may pass (cuLaunchKernel's limit before CUDA 12.1 and Volta). */
export const KERNEL_PARAM_BYTES = 4096;

const MULTI_CONSTANTS = [...ADAMW_MOMENT_CONSTANTS, 'step', 'lr', 'maxNorm', 'clipEps'];
/** stepAt, lrAt, normAt and lossScaleAt, then the constants. */
const MULTI_FIXED_BYTES = 4 * 8 + 4 * MULTI_CONSTANTS.length;
/** Four pointers, then the size, first block and weight decay. */
const MULTI_SLOT_BYTES = 4 * 8 + 3 * 4;

/** The most tensors one launch updates. */
export const MULTI_ADAMW_SLOTS = Math.floor((KERNEL_PARAM_BYTES - MULTI_FIXED_BYTES) / MULTI_SLOT_BYTES);

/** Which per-step values the multi-tensor kernel reads from device tensors. */
export interface MultiAdamwDeviceInputs extends AdamwDeviceInputs {
  readonly norm: boolean;
  /** The gradients carry a loss scale (read from a device tensor): unscaled in the clip factor, the step skipped on a non-finite norm. */
  readonly lossScale?: boolean;
}

export function multiAdamwKey(
  slots: number,
  width: VectorWidth,
  device: MultiAdamwDeviceInputs,
  grad: FloatStorage = 'f32',
): string {
  const at = `${device.step ? '/step-at' : ''}${device.lr ? '/lr-at' : ''}${device.norm ? '/clip' : ''}${device.lossScale ? '/unscale' : ''}`;
  return `optimizer/multiTensorAdamw/slots${slots}/v${width}${at}${storageKey([grad])}`;
}

/** The register-held fields of one slot. */
interface Slot {
  readonly ptrs: R64[];
  readonly n: R32;
  readonly first: R32;
  readonly wd: F32;
}

/** Loads slot `s`'s parameters into `into`. */
function loadSlot(
  k: KernelBuilder,
  p: Readonly<Record<string, Param<ParamType>>>,
  s: number,
  into: Slot,
): void {
  ['p', 'g', 'm', 'v'].forEach((role, r) => {
    k.ldParam(p[`${role}${s}`] as Param<'ptr'>, into.ptrs[r]);
  });
  k.ldParam(p[`n${s}`] as Param<'u32'>, into.n);
  k.ldParam(p[`first${s}`] as Param<'u32'>, into.first);
  k.ldParam(p[`wd${s}`] as Param<'f32'>, into.wd);
}

/** Slot lo…hi−1 whose blocks hold `block`: a binary search over the first blocks, unrolled at build time. */
function selectSlot(
  k: KernelBuilder,
  p: Readonly<Record<string, Param<ParamType>>>,
  block: R32,
  lo: number,
  hi: number,
  into: Slot,
): void {
  if (hi - lo === 1) {
    loadSlot(k, p, lo, into);
    return;
  }
  const mid = (lo + hi) >> 1;
  const first = k.ldParam(p[`first${mid}`] as Param<'u32'>);
  const above = k.setp('ge', 'u32', k.reg('pred'), block, first);
  k.ifElse(
    above,
    () => selectSlot(k, p, block, mid, hi, into),
    () => selectSlot(k, p, block, lo, mid, into),
  );
}

/** The largest finite f32: a norm above it (or NaN, unordered) is not finite. */
const MAX_F32 = 3.4028234663852886e38;

/**
 * Under a loss scale S: ends the thread where the norm of the scaled
 * gradients is not finite (the step is skipped: the block's threads all
 * read the same norm), and otherwise gives the clip factor of the unscaled
 * norm divided by S, what each gradient is multiplied by.
 */
function unscaledClip(
  k: KernelBuilder,
  p: Readonly<Record<string, Param<ParamType>>>,
  norm: F32,
  c: Record<string, F32>,
): F32 {
  const magnitude = k.abs('f32', k.reg('f32'), norm);
  k.ifThen(k.setp('gtu', 'f32', k.reg('pred'), magnitude, MAX_F32), () => k.ret());
  const { mul, div } = arithmetic(k);
  const lossScale = k.ldGlobal('f32', k.reg('f32'), loadPointer(k, p, 'lossScaleAt'));
  const unscale = div(k.mov('f32', k.reg('f32'), 1), lossScale);
  return mul(clipScale(k, mul(norm, unscale), c.maxNorm!, c.clipEps!), unscale);
}

export function multiAdamwModule(
  slots: number,
  width: VectorWidth,
  device: MultiAdamwDeviceInputs,
  gradType: FloatStorage = 'f32',
): PtxModule {
  const params: Record<string, ParamType> = {};
  // Pointers first, so that the 4-byte values pack without padding.
  for (let s = 0; s < slots; s++) for (const role of ['p', 'g', 'm', 'v']) params[`${role}${s}`] = 'ptr';
  if (device.step) params.stepAt = 'ptr';
  if (device.lr) params.lrAt = 'ptr';
  if (device.norm) params.normAt = 'ptr';
  if (device.lossScale) params.lossScaleAt = 'ptr';
  for (const name of MULTI_CONSTANTS) params[name] = 'f32';
  for (let s = 0; s < slots; s++)
    Object.assign(params, { [`n${s}`]: 'u32', [`first${s}`]: 'u32', [`wd${s}`]: 'f32' });
  const m = new PtxModule();
  m.entry(
    'multi_adamw',
    params,
    (k, p: Readonly<Record<string, Param<ParamType>>>) => {
      const slot: Slot = {
        ptrs: [0, 1, 2, 3].map(() => k.reg('u64')),
        n: k.reg('u32'),
        first: k.reg('u32'),
        wd: k.reg('f32'),
      };
      const block = k.ctaid('x');
      selectSlot(k, p, block, 0, slots, slot);
      const ptrs = slot.ptrs.map((ptr) => k.cvtaToGlobal(k.reg('u64'), ptr));
      const c = f32Params(k, p, MULTI_CONSTANTS);
      const { fma, neg } = arithmetic(k);
      const { lr, ...corrections } = stepConstants(k, p, c, device);
      const constants = { ...c, ...corrections, decay: fma(neg(lr), slot.wd, 1) };
      const norm = device.norm ? k.ldGlobal('f32', k.reg('f32'), loadPointer(k, p, 'normAt')) : undefined;
      const scale =
        norm && (device.lossScale ? unscaledClip(k, p, norm, c) : clipScale(k, norm, c.maxNorm!, c.clipEps!));
      // This block's chunk: [start, start + len) of the tensor.
      const start = k.mulLo(
        'u32',
        k.reg('u32'),
        k.sub('u32', k.reg('u32'), block, slot.first),
        MULTI_ADAMW_CHUNK,
      );
      const len = k.min('u32', k.reg('u32'), k.sub('u32', k.reg('u32'), slot.n, start), MULTI_ADAMW_CHUNK);
      const at = (offset: R32) => k.add('u32', k.reg('u32'), start, offset);
      const shift = Math.log2(width);
      const groups = k.shr('u32', k.reg('u32'), len, shift);
      const g = k.reg('u32');
      k.forRange(g, k.tid('x'), groups, BLOCK, () => {
        adamwElements(k, ptrs, constants, at(k.shl('b32', k.reg('u32'), g, shift)), width, gradType, scale);
      });
      if (width > 1) {
        const tail = k.add('u32', k.reg('u32'), k.shl('b32', k.reg('u32'), groups, shift), k.tid('x'));
        k.guard(tail, len, () => adamwElements(k, ptrs, constants, at(tail), 1, gradType, scale));
      }
    },
    { maxThreadsPerBlock: BLOCK },
  );
  return m;
}

/** One launch's tensors: at most MULTI_ADAMW_SLOTS, sharing a vector width. */
export interface MultiAdamwGroup {
  /** Indices into the call's tensors. */
  readonly tensors: readonly number[];
  readonly width: VectorWidth;
}

/**
 * Launches for tensors of the given (param, grad, m, v) operands: grouped by
 * the vector width their alignment allows, each group split into the fewest
 * launches of at most MULTI_ADAMW_SLOTS, as even as possible (one module
 * serves them all). Empty tensors are left out: they have nothing to update.
 */
export function multiAdamwGroups(quads: readonly (readonly Operand[])[]): MultiAdamwGroup[] {
  const byWidth = new Map<VectorWidth, number[]>();
  quads.forEach((quad, j) => {
    if (quad[0]!.size === 0) return;
    const width = vectorWidthFor(quad);
    byWidth.set(width, [...(byWidth.get(width) ?? []), j]);
  });
  const groups: MultiAdamwGroup[] = [];
  for (const width of [4, 2, 1] as const) {
    const list = byWidth.get(width) ?? [];
    const launches = Math.ceil(list.length / MULTI_ADAMW_SLOTS);
    const per = Math.ceil(list.length / Math.max(1, launches));
    for (let i = 0; i < list.length; i += per) groups.push({ tensors: list.slice(i, i + per), width });
  }
  return groups;
}

const multiAdamwKernel = cudaKernel(
  multiTensorAdamw,
  (encoder, { inputs, attrs }) => {
    const [stepAt, lrAt, normAt, lossScaleAt] = inputs as (Operand | undefined)[];
    const tensors = inputs.slice(MULTI_ADAMW_FIXED) as Operand[];
    const quads = Array.from({ length: tensors.length / 4 }, (_, j) => tensors.slice(4 * j, 4 * j + 4));
    quads.forEach((quad, j) => {
      checkElementCount('multiTensorAdamw', `tensors[${4 * j}]`, quad[0]!.size);
    });
    const device = {
      step: stepAt !== undefined,
      lr: lrAt !== undefined,
      norm: normAt !== undefined,
      lossScale: lossScaleAt !== undefined,
    };
    const { weightDecay } = attrs;
    const constants = adamwDeviceConstants({ ...attrs, weightDecay: 0 });
    // The gradients share one dtype (their dtype group's).
    const gradType = quads.length > 0 ? storageOf(quads[0]![1]!) : 'f32';
    for (const { tensors: group, width } of multiAdamwGroups(quads)) {
      const args: Record<string, LaunchValue> = {
        ...Object.fromEntries(MULTI_CONSTANTS.slice(0, -2).map((name) => [name, constants[name]!])),
        maxNorm: attrs.maxNorm,
        clipEps: attrs.clipEps,
        ...(stepAt ? { stepAt } : {}),
        ...(lrAt ? { lrAt } : {}),
        ...(normAt ? { normAt } : {}),
        ...(lossScaleAt ? { lossScaleAt } : {}),
      };
      let blocks = 0;
      group.forEach((j, s) => {
        const [param, grad, m, v] = quads[j]!;
        Object.assign(args, { [`p${s}`]: param!, [`g${s}`]: grad!, [`m${s}`]: m!, [`v${s}`]: v! });
        args[`n${s}`] = param!.size;
        args[`first${s}`] = blocks;
        args[`wd${s}`] = weightDecay.length === 1 ? weightDecay[0]! : weightDecay[j]!;
        blocks += Math.ceil(param!.size / MULTI_ADAMW_CHUNK);
      });
      encoder.launch({
        key: multiAdamwKey(group.length, width, device, gradType),
        module: () => multiAdamwModule(group.length, width, device, gradType),
        entry: 'multi_adamw',
        grid: blocks,
        block: BLOCK,
        args,
      });
    }
  },
  { dtypes: FLOAT },
);

export const OPTIMIZER_KERNELS: readonly AnyCudaKernel[] = [
  adamwKernel,
  sgdKernel,
  clipKernel,
  globalNormKernel,
  multiAdamwKernel,
  lossScaleKernel,
];
