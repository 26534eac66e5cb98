import type { KernelBuilder } from '../ptx/kernel.js';
import { addr, type F32, type R32 } from '../ptx/operands.js';
import { warpSum } from './gemv.js';

// An rmsNorm folded into a product (core's foldedNorm.ts): the threads that
// read x sum x² beside it, and each row's sums are scaled by the row's
// 1 / sqrt(mean(x²) + eps) before they are stored.

/**
 * Each row's Σ of `squares` over the block's `warps` warps (summed across a
 * warp, then through shared memory), then 1 / sqrt(Σ / K + eps) in every
 * thread, with IEEE square root and reciprocal as rmsNorm's. Every thread of
 * the block must call it (it holds a barrier); `squares` are overwritten.
 */
export function blockInverseRms(
  k: KernelBuilder,
  squares: readonly F32[],
  o: { readonly tid: R32; readonly kDim: R32; readonly eps: F32; readonly warps: number },
): F32[] {
  const rows = squares.length;
  const partials = k.sharedAddress(k.sharedArray('normSquares', 'f32', o.warps * rows, 4));
  const lane = k.and('b32', k.reg('u32'), o.tid, 31);
  const warpAt = k.madLo('u32', k.reg('u32'), k.shr('u32', k.reg('u32'), o.tid, 5), rows * 4, partials);
  squares.forEach((sum, r) => {
    warpSum(k, [sum]);
    k.ifThen(k.setp('eq', 'u32', k.reg('pred'), lane, r), () => k.stShared('f32', addr(warpAt, r * 4), sum));
  });
  k.barSync();
  const count = k.cvt('f32', 'u32', k.reg('f32'), o.kDim, { rnd: 'rn' });
  return squares.map((_, r) => {
    const sum = k.mov('f32', k.reg('f32'), 0);
    for (let w = 0; w < o.warps; w++)
      k.add('f32', sum, sum, k.ldShared('f32', k.reg('f32'), addr(partials, (w * rows + r) * 4)), {
        rnd: 'rn',
      });
    const t = k.div('f32', k.reg('f32'), sum, count, 'rn');
    k.add('f32', t, t, o.eps, { rnd: 'rn' });
    return k.rcp(k.reg('f32'), k.sqrt(k.reg('f32'), t, 'rn'), 'rn');
  });
}
