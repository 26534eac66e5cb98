import { UnsupportedOnBackendError } from '@rayo/core';
import type { DeviceProperties } from '../driver/driver.js';
import type { Tuple, VecOf } from '../ptx/instructionTypes.js';
import type { KernelBuilder } from '../ptx/kernel.js';
import type { ParamHandles } from '../ptx/module.js';
import type { Param, R32, R64, SharedVar } from '../ptx/operands.js';
import type { ParamType } from '../ptx/types.js';

/** Threads per block of the one-dimensional kernels. */
export const BLOCK = 256;

/**
 * The most elements the 32-bit indexed kernels cover: with `n < 2^31`, a
 * grid-stride index plus the grid's thread count never wraps around 2^32.
 */
export const MAX_ELEMENTS = 2 ** 31 - 1;

/** The half dtypes the tensor-core products read (they accumulate in f32). */
export type HalfDType = 'f16' | 'bf16';

/** Throws UnsupportedOnBackendError for an operand too large for 32-bit indexing. */
export function checkElementCount(kernel: string, argument: string, n: number): void {
  if (n > MAX_ELEMENTS) {
    throw new UnsupportedOnBackendError('operand has more elements than the CUDA kernels index', {
      operation: kernel,
      argument,
      expected: `at most ${MAX_ELEMENTS} elements`,
      actual: String(n),
    });
  }
}

/**
 * Blocks for a grid-stride loop over `n` elements: enough to cover `n` once,
 * but no more than the device keeps resident at a time.
 */
export function gridFor(device: DeviceProperties, n: number, block = BLOCK): number {
  const resident =
    device.multiprocessors * Math.max(1, Math.floor(device.maxThreadsPerMultiprocessor / block));
  return Math.max(1, Math.min(Math.ceil(n / block), resident));
}

/** A u32 parameter of a dynamically declared entry, loaded into a register. */
export function loadU32(
  k: KernelBuilder,
  params: Readonly<Record<string, Param<ParamType>>>,
  name: string,
): R32 {
  return k.ldParam(params[name] as Param<'u32'>);
}

/** A pointer parameter of a dynamically declared entry, as a global address. */
export function loadPointer(
  k: KernelBuilder,
  params: Readonly<Record<string, Param<ParamType>>>,
  name: string,
): R64 {
  return k.globalPointer(params[name] as Param<'ptr'>);
}

/** Addresses of `count` consecutive tiles of `tileBytes` bytes from the start of `smem`. */
export function sharedTiles<N extends number>(
  k: KernelBuilder,
  smem: SharedVar,
  tileBytes: number,
  count: N,
): Tuple<R32, N> {
  const base = k.sharedAddress(smem);
  const rest = Array.from({ length: count - 1 }, (_, i) =>
    k.add('u32', k.reg('u32'), base, (i + 1) * tileBytes),
  );
  return [base, ...rest] as Tuple<R32, N>;
}

/** A load or store operand of `regs.length` (1, 2 or 4) registers: `.v2`/`.v4` where more than one. */
export function asVector<R>(regs: readonly R[]): VecOf<R> {
  return regs.length === 1 ? regs[0]! : (regs as unknown as VecOf<R>);
}

/** The parameters the tiled matrix products share besides their operands: c, y, the shape, the scales, the tile grid. */
export const PRODUCT_PARAMS = {
  c: 'ptr',
  y: 'ptr',
  m: 'u32',
  n: 'u32',
  k: 'u32',
  alpha: 'f32',
  beta: 'f32',
  strideY: 'u32',
  tilesM: 'u32',
  tilesN: 'u32',
} as const;

/** M, N and K and the tile grid, loaded from the PRODUCT_PARAMS parameters. */
export function productDims(k: KernelBuilder, p: ParamHandles<typeof PRODUCT_PARAMS>) {
  return {
    mDim: k.ldParam(p.m),
    nDim: k.ldParam(p.n),
    kDim: k.ldParam(p.k),
    tilesM: k.ldParam(p.tilesM),
    tilesN: k.ldParam(p.tilesN),
  };
}
