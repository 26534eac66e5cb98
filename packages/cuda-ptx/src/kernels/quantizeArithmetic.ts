import type { KernelBuilder } from '../ptx/kernel.js';
import type { F32, R32 } from '../ptx/operands.js';
import { type FloatStorage, toHalfBits } from './storage.js';

// The PTX pieces the quantizeRows kernels share, written so that a device
// gives the host quantizer's bits (quant/rounding.ts): every value one
// correctly rounded f32 operation (`.rn` keeps ptxas from fusing a product
// into the next addition), and a code the integer nearest to t / scale,
// ties up, decided by the exact sign of fma(−(q ± ½), scale, t).

/** x as +0 where it is ±0 (the host's `positiveZero`). */
export function positiveZero(k: KernelBuilder, x: F32): F32 {
  const zero = k.setp('eq', 'f32', k.reg('pred'), x, 0);
  return k.selp('f32', k.reg('f32'), 0, x, zero);
}

/** The f32 `value` rounded to `type` and back: the scale as stored. */
export function asStored(k: KernelBuilder, type: FloatStorage, value: F32): F32 {
  if (type === 'f32') return value;
  const bits = toHalfBits(k, type, value);
  if (type === 'f16') return k.cvt('f32', 'f16', k.reg('f32'), bits);
  const wide = k.cvt('u32', 'u16', k.reg('u32'), bits);
  return k.mov('b32', k.reg('f32'), k.shl('b32', k.reg('u32'), wide, 16));
}

/** The integer nearest to t / scale (ties up) as s32, for scale > 0 (see rounding.ts). */
export function nearestQuotient(k: KernelBuilder, t: F32, scale: F32): R32 {
  const x = k.div('f32', k.reg('f32'), t, scale, 'rn');
  const q = k.cvt('f32', 'f32', k.reg('f32'), x, { rnd: 'rni' });
  const up = k.fma(
    'f32',
    k.reg('f32'),
    k.neg('f32', k.reg('f32'), k.add('f32', k.reg('f32'), q, 0.5)),
    scale,
    t,
  );
  const down = k.fma(
    'f32',
    k.reg('f32'),
    k.neg('f32', k.reg('f32'), k.sub('f32', k.reg('f32'), q, 0.5)),
    scale,
    t,
  );
  const isUp = k.setp('ge', 'f32', k.reg('pred'), up, 0);
  const isDown = k.setp('lt', 'f32', k.reg('pred'), down, 0);
  const qi = k.cvt('s32', 'f32', k.reg('s32'), q, { rnd: 'rzi' });
  const raised = k.add('s32', k.reg('s32'), qi, 1);
  const lowered = k.sub('s32', k.reg('s32'), qi, 1);
  const result = k.selp('s32', k.reg('s32'), lowered, qi, isDown);
  return k.selp('s32', result, raised, result, isUp);
}
