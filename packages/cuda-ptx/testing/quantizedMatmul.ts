import {
  type Backend,
  type QuantFormat,
  quantizeWeights,
  runQuantizedMatmul,
  type Tensor,
  uploadQuantized,
} from '@rayo/core';
import { seededUniform } from '@rayo/cuda-testkit';

/** Arrays of uniform values in (−scale, scale), the same on every run from `seed`. */
export function seededArrays(seed: number): (n: number, scale?: number) => Float32Array {
  const next = seededUniform(seed, -1, 1);
  return (n, scale = 1) => Float32Array.from({ length: n }, () => next() * scale);
}

/**
 * A random quantizedMatmul problem: x (m × k), weights (n × k) quantized as
 * `format`, c (m × n); it returns the runner of y = x · dequant(w)ᵀ + 0.5 · c
 * on a backend, so that a device and the cpu reference take the same inputs.
 */
export function quantizedMatmulProblem(
  random: (n: number, scale?: number) => Float32Array,
  [format, zeroPoints, m, k, n]: readonly [QuantFormat, boolean, number, number, number],
): (backend: Backend) => Tensor {
  const host = quantizeWeights(random(n * k, 0.05), [n, k], format, { zeroPoints });
  const x = random(m * k);
  const c = random(m * n);
  return (backend) => {
    const w = uploadQuantized(backend, host);
    return runQuantizedMatmul(backend, backend.upload(x, [m, k]), w, {
      c: backend.upload(c, [m, n]),
      beta: 0.5,
    });
  };
}
