import { clipByGlobalNorm, FLOAT, globalNorm } from '@rayo/core';
import { cudaKernel, type KernelEncoder, type LaunchValue, type Operand } from '../kernel.js';
import type { KernelBuilder } from '../ptx/kernel.js';
import { PtxModule } from '../ptx/module.js';
import type { F32, Param, R32, R64 } from '../ptx/operands.js';
import type { ParamType } from '../ptx/types.js';
import { BLOCK, checkElementCount, loadPointer, loadU32 } from './common.js';
import { keepNaN } from './math.js';
import {
  arithmetic,
  blockSum,
  isThreadZero,
  loadTyped,
  storeTyped,
  type VectorWidth,
  vectorGrid,
  vectorLoop,
  vectorWidthFor,
} from './optimizerLoops.js';
import { type FloatStorage, storageKey, storageOf } from './storage.js';

// Clip by global norm, and the global norm alone: each launch's gradients add
// their squares into per-block partials, one block adds the partials into the
// norm, and the clip then scales every gradient by the factor of that norm.

/**
 * Gradients per launch, each a pointer and a length parameter: a model's
 * few hundred tensors take a few launches per pass rather than one each.
 */
export const CLIP_SLOTS = 16;

export function clipSumSquaresKey(slots: number, width: VectorWidth, type: FloatStorage = 'f32'): string {
  return `optimizer/clipByGlobalNorm/sumSquares/slots${slots}/v${width}${storageKey([type])}`;
}

export function clipScaleKey(slots: number, width: VectorWidth, type: FloatStorage = 'f32'): string {
  return `optimizer/clipByGlobalNorm/scale/slots${slots}/v${width}${storageKey([type])}`;
}

export const CLIP_NORM_KEY = `optimizer/clipByGlobalNorm/norm/block${BLOCK}`;
export const GLOBAL_NORM_KEY = `optimizer/globalNorm/norm/block${BLOCK}`;

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
export function clipSumSquaresModule(
  slots: number,
  width: VectorWidth,
  type: FloatStorage = 'f32',
): PtxModule {
  const m = new PtxModule();
  m.entry(
    'clip_sum_squares',
    { partials: 'ptr', ...slotParams(slots) },
    (k, p: Readonly<Record<string, Param<ParamType>>>) => {
      const acc = k.mov('f32', k.reg('f32'), 0);
      forEachSlotElement(k, p, slots, width, (g, i, w) => {
        for (const x of loadTyped(k, type, g, i, w)) k.fma('f32', acc, x, x, acc);
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
 * Pass 2, one block: norm = √(Σ partials) and, with `withScale`, scale =
 * min(1, maxNorm / (norm + eps)), NaN kept (min.f32 would drop it): a NaN
 * gradient makes every gradient NaN, as in the reference.
 */
export function clipNormModule(withScale = true): PtxModule {
  const m = new PtxModule();
  const params: Record<string, ParamType> = { partials: 'ptr', count: 'u32', norm: 'ptr' };
  if (withScale) Object.assign(params, { scale: 'ptr', maxNorm: 'f32', eps: 'f32' });
  m.entry(
    withScale ? 'clip_norm' : 'global_norm',
    params,
    (k, p: Readonly<Record<string, Param<ParamType>>>) => {
      const partials = loadPointer(k, p, 'partials');
      const count = loadU32(k, p, 'count');
      const acc = k.mov('f32', k.reg('f32'), 0);
      const i = k.reg('u32');
      k.forRange(i, k.tid('x'), count, BLOCK, () => {
        const partial = k.ldGlobal('f32', k.reg('f32'), k.elementAddress(partials, i, 4));
        k.add('f32', acc, acc, partial, { rnd: 'rn' });
      });
      const total = blockSum(k, acc);
      k.ifThen(isThreadZero(k), () => {
        const norm = k.sqrt(k.reg('f32'), total);
        k.stGlobal('f32', loadPointer(k, p, 'norm'), norm);
        if (!withScale) return;
        const scale = clipScale(
          k,
          norm,
          ...(['maxNorm', 'eps'].map((name) => k.ldParam(p[name] as Param<'f32'>)) as [F32, F32]),
        );
        k.stGlobal('f32', loadPointer(k, p, 'scale'), scale);
      });
    },
    { requiredThreadsPerBlock: BLOCK },
  );
  return m;
}

/** min(1, maxNorm / (norm + eps)) in f32, NaN kept. */
export function clipScale(k: KernelBuilder, norm: F32, maxNorm: F32, eps: F32): F32 {
  const denom = k.add('f32', k.reg('f32'), norm, eps, { rnd: 'rn' });
  const ratio = k.div('f32', k.reg('f32'), maxNorm, denom, 'rn');
  return keepNaN(k, ratio, k.min('f32', k.reg('f32'), ratio, 1));
}

/** Pass 3: g ← g · scale, skipped where scale is exactly 1 (nothing would change), the usual case. */
export function clipScaleModule(slots: number, width: VectorWidth, type: FloatStorage = 'f32'): PtxModule {
  const m = new PtxModule();
  m.entry(
    'clip_scale',
    { scale: 'ptr', ...slotParams(slots) },
    (k, p: Readonly<Record<string, Param<ParamType>>>) => {
      const scale = k.ldGlobal('f32', k.reg('f32'), loadPointer(k, p, 'scale'));
      const { mul } = arithmetic(k);
      k.ifThen(k.setp('neu', 'f32', k.reg('pred'), scale, 1), () => {
        forEachSlotElement(k, p, slots, width, (g, i, w) => {
          storeTyped(
            k,
            type,
            g,
            i,
            loadTyped(k, type, g, i, w).map((x) => mul(x, scale)),
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

/**
 * Pass 1 over `grads` into fresh scratch: the partial sums of squares, then
 * `extraWords` more words for the caller. Returns where they are and how many.
 */
function encodeSumSquares(
  encoder: KernelEncoder,
  kernel: string,
  argument: string,
  grads: readonly Operand[],
  extraWords: number,
): { partials: bigint; partialCount: number } {
  grads.forEach((g, i) => {
    checkElementCount(kernel, `${argument}[${i}]`, g.size);
  });
  const sums = clipGroups(grads, false).map((group) => ({
    group,
    blocks: vectorGrid(encoder, group.elements, group.width),
  }));
  const partialCount = sums.reduce((total, s) => total + s.blocks, 0);
  const partials = encoder.scratch(4 * (partialCount + extraWords));
  let offset = 0;
  // The tensors share one dtype (one dtype group).
  const type = grads.length > 0 ? storageOf(grads[0]!) : 'f32';
  for (const { group, blocks } of sums) {
    const slots = group.grads.length;
    encoder.launch({
      key: clipSumSquaresKey(slots, group.width, type),
      module: () => clipSumSquaresModule(slots, group.width, type),
      entry: 'clip_sum_squares',
      grid: blocks,
      block: BLOCK,
      args: { partials: partials + BigInt(4 * offset), ...slotArgs(group.grads) },
    });
    offset += blocks;
  }
  return { partials, partialCount };
}

export const clipKernel = cudaKernel(
  clipByGlobalNorm,
  (encoder, { inputs, outputs, attrs }) => {
    const grads = inputs as Operand[];
    const norm = outputs[outputs.length - 1]!;
    // The partials, then the scale: the norm and scale never leave the device.
    const { partials, partialCount } = encodeSumSquares(encoder, 'clipByGlobalNorm', 'grads', grads, 1);
    const scale = partials + BigInt(4 * partialCount);
    encoder.launch({
      key: CLIP_NORM_KEY,
      module: () => clipNormModule(true),
      entry: 'clip_norm',
      grid: 1,
      block: BLOCK,
      args: { partials, count: partialCount, norm, scale, maxNorm: attrs.maxNorm, eps: attrs.eps },
    });
    const type = grads.length > 0 ? storageOf(grads[0]!) : 'f32';
    for (const group of clipGroups(grads, true)) {
      const slots = group.grads.length;
      encoder.launch({
        key: clipScaleKey(slots, group.width, type),
        module: () => clipScaleModule(slots, group.width, type),
        entry: 'clip_scale',
        grid: vectorGrid(encoder, group.elements, group.width),
        block: BLOCK,
        args: { scale, ...slotArgs(group.grads) },
      });
    }
  },
  { dtypes: FLOAT },
);

export const globalNormKernel = cudaKernel(
  globalNorm,
  (encoder, { inputs, outputs }) => {
    const { partials, partialCount } = encodeSumSquares(encoder, 'globalNorm', 'xs', inputs as Operand[], 0);
    encoder.launch({
      key: GLOBAL_NORM_KEY,
      module: () => clipNormModule(false),
      entry: 'global_norm',
      grid: 1,
      block: BLOCK,
      args: { partials, count: partialCount, norm: outputs[0]! },
    });
  },
  { dtypes: FLOAT },
);
