import { bf16BitsToF32, f16BitsToF32 } from '../../dtype.js';
import { CAST_DTYPES, cast } from '../../kernels/cast.js';
import { type FamilyCases, type InputInit, invalid, newFamilyCases, valid } from '../cases.js';

// A conversion is exact: round to nearest even is the only right answer.
const EXACT = { rtol: 0, atol: 0 } as const;

/** Magnitudes from 2^-30 to 2^20: subnormals and overflow of f16, never zero. */
const spanning: InputInit = (rng, size) =>
  Array.from({ length: size }, () => (rng.next() < 0.5 ? -1 : 1) * 2 ** rng.uniform(-30, 20));

/** NaN, ±Inf, f16 and bf16 subnormals and their boundaries, overflow to Inf, and halfway ties. */
const SPECIALS = [
  Number.NaN,
  Number.POSITIVE_INFINITY,
  Number.NEGATIVE_INFINITY,
  -0,
  2 ** -24, // smallest f16 subnormal
  2 ** -25, // half of it: a tie, to zero
  3 * 2 ** -25, // a tie between two subnormals, to the even one
  -(2 ** -14 - 2 ** -25), // rounds up into the smallest normal
  2 ** -133, // smallest bf16 subnormal
  2 ** -130,
  65504, // largest f16
  65519, // still rounds to it
  65520, // halfway to 2^16: overflows to Inf
  -70000,
  3.3895313892515355e38, // largest bf16
  3.4028234663852886e38, // largest f32: Inf in bf16
  1 + 2 ** -11, // f16 tie, to 1
  1 + 3 * 2 ** -11, // f16 tie, to the even neighbour above
  1 + 2 ** -8, // bf16 tie, to 1
  -(1 + 3 * 2 ** -8), // bf16 tie, away from 1
  1 / 3,
  -2.5,
];

const specials: InputInit = (_rng, size) =>
  Array.from({ length: size }, (_, i) => SPECIALS[i % SPECIALS.length]!);

/** Every 16-bit word decoded: each f16 or bf16 value there is, NaN and ±Inf included. */
function everyWord(decode: (bits: number) => number): InputInit {
  return () => Array.from({ length: 0x10000 }, (_, bits) => decode(bits));
}

const { cases, errors } = newFamilyCases();

for (const from of CAST_DTYPES) {
  for (const to of CAST_DTYPES) {
    cases.push(
      valid(cast, {
        label: `${from} → ${to} [1031] across magnitudes`,
        inputs: [{ shape: [1031], dtype: from, init: spanning }],
        attrs: { to },
        tolerance: EXACT,
      }),
      valid(cast, {
        label: `${from} → ${to} specials`,
        inputs: [{ shape: [3, SPECIALS.length], dtype: from, init: specials }],
        attrs: { to },
        tolerance: EXACT,
      }),
    );
  }
}
cases.push(
  valid(cast, { label: 'f32 → f16 [1]', inputs: [{ shape: [1] }], attrs: { to: 'f16' }, tolerance: EXACT }),
  valid(cast, {
    label: 'f32 → bf16 [7, 13, 3]',
    inputs: [{ shape: [7, 13, 3], init: 'wide' }],
    attrs: { to: 'bf16' },
    tolerance: EXACT,
  }),
  valid(cast, {
    label: 'f16 → bf16 [65537]',
    inputs: [{ shape: [65537], dtype: 'f16', init: 'wide' }],
    attrs: { to: 'bf16' },
    tolerance: EXACT,
  }),
);
for (const to of CAST_DTYPES) {
  cases.push(
    valid(cast, {
      label: `every f16 word → ${to}`,
      inputs: [{ shape: [256, 256], dtype: 'f16', init: everyWord(f16BitsToF32) }],
      attrs: { to },
      tolerance: EXACT,
    }),
    valid(cast, {
      label: `every bf16 word → ${to}`,
      inputs: [{ shape: [0x10000], dtype: 'bf16', init: everyWord(bf16BitsToF32) }],
      attrs: { to },
      tolerance: EXACT,
    }),
  );
}

errors.push(
  invalid(cast, {
    label: "a 'to' that is not a float dtype",
    inputs: [{ shape: [3] }],
    attrs: { to: 'i32' as 'f32' },
    error: 'argument',
    argument: 'attrs.to',
  }),
);

export const castCases: FamilyCases = { cases, errors };
