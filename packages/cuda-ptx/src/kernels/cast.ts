import { type CastDType, cast, FLOAT } from '@rayo/core';
import { type AnyCudaKernel, cudaKernel, type KernelEncoder } from '../kernel.js';
import type { KernelBuilder } from '../ptx/kernel.js';
import { PtxModule } from '../ptx/module.js';
import type { R32, R64 } from '../ptx/operands.js';
import { BLOCK, checkElementCount, gridFor } from './common.js';
import { loadAllParams } from './entryParams.js';
import { toHalfBits } from './storage.js';

// f16 converts with cvt (IEEE: round to nearest even, overflow to Inf,
// subnormals kept). bf16 is integer code on the bit patterns, so the module
// keeps the default target: bf16 cvt needs sm_80.

const BYTES: Readonly<Record<CastDType, number>> = { f32: 4, f16: 2, bf16: 2 };

export function castKey(from: CastDType, to: CastDType): string {
  return `cast/${from}_${to}`;
}

/** The f32 bits of element `i` of x, in a b32 register. */
function loadBits(k: KernelBuilder, from: CastDType, x: R64, i: R32): R32 {
  const at = k.elementAddress(x, i, BYTES[from]);
  if (from === 'f32') return k.ldGlobal('u32', k.reg('u32'), at);
  const half = k.ldGlobal('b16', k.reg('b16'), at);
  const bits = k.cvt('u32', 'u16', k.reg('u32'), half);
  if (from === 'bf16') return k.shl('b32', bits, bits, 16);
  const value = k.cvt('f32', 'f16', k.reg('f32'), half);
  return k.mov('b32', k.reg('u32'), value);
}

/** Stores f32 bits as element `i` of y in `to`, rounded to nearest even. */
function storeBits(k: KernelBuilder, to: CastDType, y: R64, i: R32, bits: R32): void {
  const at = k.elementAddress(y, i, BYTES[to]);
  if (to === 'f32') {
    k.stGlobal('u32', at, bits);
    return;
  }
  // The f32 bits reinterpreted, then rounded to nearest even.
  k.stGlobal('b16', at, toHalfBits(k, to, k.mov('b32', k.reg('f32'), bits)));
}

/** y[i] = x[i] converted from `from` to `to` for i < n, with a grid-stride loop. */
export function castModule(from: CastDType, to: CastDType): PtxModule {
  const m = new PtxModule();
  m.entry(
    `cast_${from}_${to}`,
    { x: 'ptr', y: 'ptr', n: 'u32' },
    (k, p) => {
      const { x, y, n } = loadAllParams(k, p);
      k.gridStrideLoop(n, (i) => storeBits(k, to, y, i, loadBits(k, from, x, i)));
    },
    { maxThreadsPerBlock: BLOCK },
  );
  return m;
}

/** Launches y[i] = x[i] converted from `from` to `to` for the `n` elements at x into y. */
export function encodeCast(
  encoder: KernelEncoder,
  from: CastDType,
  to: CastDType,
  x: bigint,
  y: bigint,
  n: number,
): void {
  if (n === 0) return;
  encoder.launch({
    key: castKey(from, to),
    module: () => castModule(from, to),
    entry: `cast_${from}_${to}`,
    grid: gridFor(encoder.device, n),
    block: BLOCK,
    args: { x, y, n },
  });
}

const castKernel = cudaKernel(
  cast,
  (encoder, { inputs, outputs, attrs }) => {
    const x = inputs[0]!;
    const y = outputs[0]!;
    if (y.size === 0) return;
    checkElementCount('cast', 'x', y.size);
    encodeCast(encoder, x.dtype as CastDType, attrs.to, x.ptr, y.ptr, y.size);
  },
  { dtypes: FLOAT },
);

export const CAST_KERNELS: readonly AnyCudaKernel[] = [castKernel];
