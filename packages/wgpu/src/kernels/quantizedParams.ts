import type { ParamType } from '../params.js';
import type { Storage } from '../wgsl/half.js';

// The uniform fields every quantized-weight shader reads first, in this
// order (its struct layout); each shader appends its own grid fields.
export const QUANT_WEIGHT_PARAMS = [
  ['m', 'u32'],
  ['n', 'u32'],
  ['k', 'u32'],
  /** u32 words of packed data per row. */
  ['rowWords', 'u32'],
  ['groups', 'u32'],
  ['zeroWords', 'u32'],
  ['beta', 'f32'],
  /** 1 when c is given (bound to a placeholder otherwise). */
  ['hasC', 'u32'],
  /** 1 when zero points are given. */
  ['hasZeros', 'u32'],
  /** How the scales are stored: 0 f32, 1 f16, 2 bf16 (all bound as u32 words). */
  ['scaleKind', 'u32'],
  /** Row stride of y and c: all of N (n is this dispatch's columns when the weight is bound in pieces). */
  ['ldy', 'u32'],
  /** First output column of this dispatch: the first row of W it binds. */
  ['colOffset', 'u32'],
] as const satisfies readonly (readonly [string, ParamType])[];

/** The `scaleKind` parameter of a scales storage. */
export const SCALE_KINDS: Readonly<Record<Storage, number>> = { f32: 0, f16: 1, bf16: 2 };
