import { type Backend, type Shape, sizeOf } from '@rayo/core';
import { Rng } from '../random.js';
import { Tape, type Variable } from './tape.js';

export interface GradCheckInput {
  readonly data: Float32Array | readonly number[];
  readonly shape: Shape;
}

export interface GradCheckOptions {
  /** Half the central-difference step (default 1e-2: f32 values need a step well above their rounding). */
  readonly eps?: number;
  readonly atol?: number;
  readonly rtol?: number;
  /** Seed of the random output weights. */
  readonly seed?: number;
}

export interface GradCheckMismatch {
  readonly input: number;
  readonly index: number;
  readonly analytic: number;
  readonly numeric: number;
}

export interface GradCheckResult {
  readonly ok: boolean;
  /** Largest |analytic − numeric| over every checked element. */
  readonly maxAbsError: number;
  readonly checked: number;
  /** Elements outside atol + rtol · max(|analytic|, |numeric|). */
  readonly mismatches: readonly GradCheckMismatch[];
}

/**
 * Compares the gradients `Tape.backward` computes for `fn` against central
 * finite differences. The scalar differentiated is Σ r · fn(inputs) for fixed
 * random weights r, evaluated in f64 on the host from the f32 outputs, so every
 * output element takes part.
 */
export async function gradCheck(
  backend: Backend,
  fn: (tape: Tape, ...inputs: Variable[]) => Variable,
  inputs: readonly GradCheckInput[],
  options: GradCheckOptions = {},
): Promise<GradCheckResult> {
  const { eps = 1e-2, atol = 1e-3, rtol = 1e-2, seed = 1 } = options;
  const hosts = inputs.map((input) => Float32Array.from(input.data));

  // Analytic: one backward with the weights as the seed gradient.
  let weights: Float64Array;
  const analytic: Float32Array[] = [];
  {
    const tape = new Tape(backend);
    try {
      const vars = hosts.map((h, i) => tape.variable(tape.upload(h, inputs[i]!.shape)));
      const y = fn(tape, ...vars);
      const rng = new Rng(seed);
      weights = Float64Array.from(rng.normalArray(y.size));
      tape.backward(y, tape.upload(Float32Array.from(weights), y.shape));
      for (const v of vars) {
        analytic.push(v.grad ? ((await v.grad.read()) as Float32Array) : new Float32Array(v.size));
      }
    } finally {
      tape.dispose();
    }
  }

  const objective = async (values: readonly Float32Array[]): Promise<number> => {
    const tape = new Tape(backend, { grad: false });
    try {
      const vars = values.map((h, i) => tape.constant(tape.upload(h, inputs[i]!.shape)));
      const y = await fn(tape, ...vars).value.read();
      let total = 0;
      for (let i = 0; i < y.length; i++) total += weights[i]! * y[i]!;
      return total;
    } finally {
      tape.dispose();
    }
  };

  let maxAbsError = 0;
  let checked = 0;
  const mismatches: GradCheckMismatch[] = [];
  for (let i = 0; i < hosts.length; i++) {
    const n = sizeOf(inputs[i]!.shape);
    for (let j = 0; j < n; j++) {
      const x = hosts[i]![j]!;
      const plus = hosts.map((h) => h.slice());
      const minus = hosts.map((h) => h.slice());
      plus[i]![j] = x + eps;
      minus[i]![j] = x - eps;
      // The step actually taken, after rounding to f32.
      const step = plus[i]![j]! - minus[i]![j]!;
      const numeric = ((await objective(plus)) - (await objective(minus))) / step;
      const a = analytic[i]![j]!;
      const error = Math.abs(a - numeric);
      maxAbsError = Math.max(maxAbsError, error);
      checked++;
      if (!(error <= atol + rtol * Math.max(Math.abs(a), Math.abs(numeric)))) {
        mismatches.push({ input: i, index: j, analytic: a, numeric });
      }
    }
  }
  return { ok: mismatches.length === 0, maxAbsError, checked, mismatches };
}
