import { defineKernel } from '../kernel.js';
import { bytesOf, FLOAT } from './vocabulary.js';

/** The float dtypes `cast` converts between. */
export const CAST_DTYPES = FLOAT;
export type CastDType = (typeof CAST_DTYPES)[number];

type CastAttrs = { to: CastDType };

/**
 * y = x converted to `to`, rounded to nearest, ties to even. NaN stays NaN,
 * ±Inf stays ±Inf, a value beyond the target's range becomes ±Inf and one
 * below its smallest subnormal ±0, as IEEE 754 conversion does. Widening
 * (f16 or bf16 to f32) is exact.
 */
export const cast = defineKernel<CastAttrs>({
  name: 'cast',
  family: 'cast',
  summary: 'y = x converted to the dtype `to` (f32, f16, bf16), round to nearest even',
  inputs: [{ name: 'x', dtypes: FLOAT, doc: 'any shape' }],
  attributes: { to: { kind: 'enum', values: CAST_DTYPES, doc: 'the dtype of y' } },
  infer: ([x], { to }) => [{ name: 'y', shape: x!.shape, dtype: to }],
  // `runReference` widens x and rounds y to `to`: the conversion itself is the contract's rounding.
  reference: ([x]) => [Float32Array.from(x!)],
  cost: ([x], { to }) => ({ flops: 0, bytes: bytesOf(x) + bytesOf({ shape: x!.shape, dtype: to }) }),
});
