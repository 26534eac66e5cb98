import { halfPrecisionDtype, type MatmulLaunch } from '@rayo/core';
import type { KernelEncoder, Operand } from '../kernel.js';
import { encodeCast } from './cast.js';
import { MAX_ELEMENTS } from './common.js';
import { encodeFewRows, fewRowsApplies } from './matmulFewRows.js';
import { encodeTensorCore, TC_BK, TC_BN, type TensorCoreShape, tensorCoreDtype } from './matmulTensorCore.js';

// matmul's precision 'half' and half weights: f32 operands rounded into half
// scratch, and the products of a few rows (a batch of decoding sequences)
// against half weights on tensor cores with K split across blocks, their f32
// rows rounded as the kernel loads them.

/**
 * The call with its f32 a and b rounded (nearest even) into scratch in the
 * half dtype precision 'half' names; y and c stay as they are. A model's
 * prompt pays one pass over its T × hidden activations (its weights are half already).
 */
export function halfOperands<C extends MatmulLaunch<Operand>>(encoder: KernelEncoder, call: C): C {
  const half = halfPrecisionDtype(call.a.dtype, call.b.dtype);
  const rounded = (op: Operand): Operand => {
    if (op.dtype !== 'f32') return op;
    const ptr = encoder.scratch(op.size * 2);
    encodeCast(encoder, 'f32', half, op.ptr, ptr, op.size);
    return { ...op, ptr, dtype: half, byteLength: op.size * 2 };
  };
  return { ...call, a: rounded(call.a), b: rounded(call.b) };
}

/** The most rows of op(a) the small-M product takes: one warp's 64 rows of the tensor-core tile. */
export const SMALL_M_ROWS = 64;
/** Columns below which a product stays on the streaming kernels (it is too small to matter). */
export const SMALL_M_MIN_COLUMNS = 64;
/** The least K a split takes: four steps of the tile's pipeline. */
export const SMALL_M_MIN_SPLIT_K = 4 * TC_BK;
/** Blocks per SM the splits aim at: two are resident at once (`minBlocksPerSm`), keeping b's loads in flight. */
const SMALL_M_BLOCKS_PER_SM = 2;

/**
 * Splits of K for a small-M product: its 128-column tiles alone leave most
 * SMs idle where N is a few thousand (a 2048-wide product is 16 tiles),
 * and each idle SM is bandwidth not spent reading b. Each split is a whole
 * number of pipeline steps, at least SMALL_M_MIN_SPLIT_K long.
 */
export function smallMShape(
  p: { readonly m: number; readonly n: number; readonly k: number; readonly batch: number },
  multiprocessors: number,
): TensorCoreShape {
  const tiles = Math.ceil(p.n / TC_BN) * p.batch;
  const wanted = Math.min(
    Math.round((SMALL_M_BLOCKS_PER_SM * multiprocessors) / tiles),
    Math.floor(p.k / SMALL_M_MIN_SPLIT_K),
  );
  const whole = { smallM: true, splits: 1, kPerSplit: p.k };
  if (wanted < 2) return whole;
  const kPerSplit = Math.ceil(p.k / wanted / TC_BK) * TC_BK;
  const splits = Math.ceil(p.k / kPerSplit);
  // The partial sums are indexed with 32 bits.
  if (splits < 2 || splits * p.batch * p.m * p.n > MAX_ELEMENTS) return whole;
  return { smallM: true, splits, kPerSplit };
}

/**
 * Whether a product goes to the small-M path: 2 … SMALL_M_ROWS rows of
 * op(a) (one row stays on the exact GEMV), at least SMALL_M_MIN_COLUMNS
 * columns, b already half (a weight; an f32 b would be rounded whole on
 * every call), a in b's dtype or f32 under precision 'half', no linear
 * epilogue, on sm_80 or later. The streaming kernels it replaces read
 * every row of a once per output column, which at 16 rows costs many
 * times the read of b.
 */
export function smallMApplies(call: MatmulLaunch<Operand>, computeCapability: readonly number[]): boolean {
  const { a, b, m, n } = call;
  if ((computeCapability[0] ?? 0) < 8 || call.activation !== undefined) return false;
  if (m < 2 || m > SMALL_M_ROWS || n < SMALL_M_MIN_COLUMNS) return false;
  if (b.dtype !== 'bf16' && b.dtype !== 'f16') return false;
  return a.dtype === b.dtype || (a.dtype === 'f32' && call.precision === 'half');
}

/**
 * Launches a product `smallMApplies` takes; false where it takes none. An
 * f32 a is rounded to b's dtype by the kernel as it loads a.
 */
export function encodeSmallM(encoder: KernelEncoder, call: MatmulLaunch<Operand>): boolean {
  if (!smallMApplies(call, encoder.device.computeCapability)) return false;
  // The dtypes of c and y decide, with a as it is multiplied: in b's dtype.
  const half = tensorCoreDtype({ ...call, a: { ...call.a, dtype: call.b.dtype } });
  if (!half) return false;
  // Up to 16 rows in place stream b into the mma fragments; other shapes take the tile.
  if (fewRowsApplies(call)) encodeFewRows(encoder, call, half);
  else encodeTensorCore(encoder, call, half, smallMShape(call, encoder.device.multiprocessors));
  return true;
}
