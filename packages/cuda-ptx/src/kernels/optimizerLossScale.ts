import { updateLossScale } from '@rayo/core';
import { cudaKernel, type LaunchValue } from '../kernel.js';
import { PtxModule } from '../ptx/module.js';
import type { F32, Param } from '../ptx/operands.js';
import type { ParamType } from '../ptx/types.js';
import { loadPointer } from './common.js';

// GradScaler.update on the device: one thread reads the norm of the scaled
// gradients and moves the scale, its count of finite steps and the
// optimizer's step number, so that a recorded step (a CUDA graph) replays
// with no readback. Selects rather than branches: every value is stored.

/** The largest finite f32: a value above it in magnitude (or NaN, unordered) is not finite. */
const MAX_F32 = 3.4028234663852886e38;

export function lossScaleKey(withStep: boolean): string {
  return `optimizer/updateLossScale${withStep ? '/step' : ''}`;
}

export function lossScaleModule(withStep: boolean): PtxModule {
  const params: Record<string, ParamType> = { normAt: 'ptr', scaleAt: 'ptr', growthAt: 'ptr' };
  if (withStep) params.stepAt = 'ptr';
  Object.assign(params, { growthFactor: 'f32', backoffFactor: 'f32', growthInterval: 's32' });
  const m = new PtxModule();
  m.entry('update_loss_scale', params, (k, p: Readonly<Record<string, Param<ParamType>>>) => {
    const finite = (x: F32) => k.setp('le', 'f32', k.reg('pred'), k.abs('f32', k.reg('f32'), x), MAX_F32);
    const [scaleAt, growthAt] = [loadPointer(k, p, 'scaleAt'), loadPointer(k, p, 'growthAt')];
    const normIsFinite = finite(k.ldGlobal('f32', k.reg('f32'), loadPointer(k, p, 'normAt')));
    const scale = k.ldGlobal('f32', k.reg('f32'), scaleAt);
    const next = k.add('s32', k.reg('s32'), k.ldGlobal('s32', k.reg('s32'), growthAt), 1);
    const interval = k.ldParam(p.growthInterval as Param<'s32'>);
    const atInterval = k.setp('ge', 's32', k.reg('pred'), next, interval);
    const grown = k.mul('f32', k.reg('f32'), scale, k.ldParam(p.growthFactor as Param<'f32'>), { rnd: 'rn' });
    // A growth that would overflow keeps the scale (the count restarts all the same, as in PyTorch).
    const kept = k.selp('f32', k.reg('f32'), grown, scale, finite(grown));
    const afterFinite = k.selp('f32', k.reg('f32'), kept, scale, atInterval);
    const backedOff = k.mul('f32', k.reg('f32'), scale, k.ldParam(p.backoffFactor as Param<'f32'>), {
      rnd: 'rn',
    });
    k.stGlobal('f32', scaleAt, k.selp('f32', k.reg('f32'), afterFinite, backedOff, normIsFinite));
    const countAfterFinite = k.selp('s32', k.reg('s32'), 0, next, atInterval);
    k.stGlobal('s32', growthAt, k.selp('s32', k.reg('s32'), countAfterFinite, 0, normIsFinite));
    if (withStep) {
      const stepAt = loadPointer(k, p, 'stepAt');
      const advance = k.selp('s32', k.reg('s32'), 1, 0, normIsFinite);
      const step = k.ldGlobal('s32', k.reg('s32'), stepAt);
      k.stGlobal('s32', stepAt, k.add('s32', k.reg('s32'), step, advance));
    }
  });
  return m;
}

export const lossScaleKernel = cudaKernel(updateLossScale, (encoder, { inputs, attrs }) => {
  const [normAt, scaleAt, growthAt, stepAt] = inputs;
  const args: Record<string, LaunchValue> = {
    normAt: normAt!,
    scaleAt: scaleAt!,
    growthAt: growthAt!,
    ...(stepAt ? { stepAt } : {}),
    growthFactor: attrs.growthFactor,
    backoffFactor: attrs.backoffFactor,
    growthInterval: attrs.growthInterval,
  };
  encoder.launch({
    key: lossScaleKey(stepAt !== undefined),
    module: () => lossScaleModule(stepAt !== undefined),
    entry: 'update_loss_scale',
    grid: 1,
    block: 1,
    args,
  });
});
