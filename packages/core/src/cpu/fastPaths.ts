import type { HostArray } from '../dtype.js';
import type { AttrValues, KernelIO } from '../kernel.js';
import {
  batchedMatmul as batchedMatmulSpec,
  type MatmulPrecision,
  matmulOperands,
  matmul as matmulSpec,
} from '../kernels/index.js';
import { gemm } from './gemm.js';

/** A cpu kernel: f32 host arrays in, f32 host arrays out (half tensors are widened around it). */
export type Impl = (
  inputs: readonly (HostArray | undefined)[],
  attrs: AttrValues,
  io: KernelIO,
) => HostArray[];

// Kernels where the cpu backend is faster than the plain reference; the
// conformance suite checks them against it.
export const FAST_PATHS: Readonly<Record<string, Impl>> = {
  [matmulSpec.name]: ([a0, b0, c], attrs, io) => {
    const [a, b] = matmulOperands(attrs.precision as MatmulPrecision, io, a0!, b0!);
    const [m, n] = io.outputs[0]!.shape as [number, number];
    const aShape = io.inputs[0]!.shape;
    const k = attrs.transA ? aShape[0]! : aShape[1]!;
    return [
      gemm({
        m,
        n,
        k,
        a,
        b,
        c,
        alpha: attrs.alpha as number,
        beta: attrs.beta as number,
        transA: attrs.transA as boolean,
        transB: attrs.transB as boolean,
      }),
    ];
  },
  [batchedMatmulSpec.name]: ([a0, b0], attrs, io) => {
    const [a, b] = matmulOperands(attrs.precision as MatmulPrecision, io, a0!, b0!);
    const [batch, m, n] = io.outputs[0]!.shape as [number, number, number];
    const aShape = io.inputs[0]!.shape;
    const k = attrs.transA ? aShape[1]! : aShape[2]!;
    const y = new Float32Array(batch * m * n);
    for (let i = 0; i < batch; i++) {
      gemm(
        {
          m,
          n,
          k,
          a: a.subarray(i * m * k, (i + 1) * m * k),
          b: b.subarray(i * k * n, (i + 1) * k * n),
          alpha: attrs.alpha as number,
          beta: 0,
          transA: attrs.transA as boolean,
          transB: attrs.transB as boolean,
        },
        y.subarray(i * m * n, (i + 1) * m * n),
      );
    }
    return [y];
  },
};
