// What the f32 and the half matmul tests share: a product run on the device
// next to the cpu reference's result for the same operand values.
import { batchedMatmul, f16BitsToF32, inferKernel, matmul, sizeOf } from '@rayo/core';
import type { WgpuBackend } from '../src/index.js';

type Device = ReturnType<WgpuBackend['upload']>;

export interface MatmulAttrs {
  readonly transA?: boolean;
  readonly transB?: boolean;
  readonly alpha?: number;
  readonly beta?: number;
  readonly precision?: 'f32' | 'tf32' | 'half';
}

/** Every combination of transA and transB. */
export const TRANSPOSES = [
  [false, false],
  [true, false],
  [false, true],
  [true, true],
] as const;

type Operands = readonly [Device, Device, Device | undefined];
type Values = readonly [Float32Array, Float32Array, Float32Array | undefined];

/** The values of a half tensor as read back (f16 bits). */
export async function halfValues(t: Device): Promise<Float32Array> {
  return Float32Array.from((await t.read()) as Uint16Array, f16BitsToF32);
}

/**
 * Uploads a and b of a product [m, k, n] (with a leading `batch`, transposed
 * as `attrs` say) and, `withC`, c [m, n], from `random` values stored in
 * `dtype`; returns them and their values as stored (halves rounded), which
 * the reference takes.
 */
export async function uploadOperands(
  backend: WgpuBackend,
  batch: number | undefined,
  [m, k, n]: readonly [number, number, number],
  attrs: MatmulAttrs,
  withC: boolean,
  random: (size: number) => Float32Array | number[],
  dtype: 'f32' | 'f16',
): Promise<{ operands: Operands; values: Values }> {
  const lead = batch === undefined ? [] : [batch];
  const aShape = [...lead, ...(attrs.transA ? [k, m] : [m, k])];
  const bShape = [...lead, ...(attrs.transB ? [n, k] : [k, n])];
  const host = [random(sizeOf(aShape)), random(sizeOf(bShape)), withC ? random(m * n) : undefined] as const;
  const operands = [
    backend.upload(host[0], aShape, dtype),
    backend.upload(host[1], bShape, dtype),
    host[2] && backend.upload(host[2], [m, n], dtype),
  ] as const;
  if (dtype === 'f32') {
    const [av, bv, cv] = host;
    return { operands, values: [Float32Array.from(av), Float32Array.from(bv), cv && Float32Array.from(cv)] };
  }
  const [a, b, c] = operands;
  return { operands, values: await Promise.all([halfValues(a), halfValues(b), c && halfValues(c)]) };
}

/**
 * Runs matmul (or, with a `batch`, batchedMatmul, which takes no c or beta)
 * on the uploaded operands, and the reference on `values`, the operands as
 * the device holds them. The caller disposes `y`.
 */
export function runWithReference(
  backend: WgpuBackend,
  batch: number | undefined,
  [a, b, c]: Operands,
  values: Values,
  attrs: MatmulAttrs,
): { y: Device; expected: Float32Array } {
  const metas = [a, b, c].map((t) => (t ? { shape: t.shape, dtype: t.dtype } : undefined));
  if (batch === undefined) {
    const io = inferKernel(matmul, metas, attrs);
    const expected = matmul.reference([...values], io.attrs, { inputs: metas, outputs: io.outputs })[0];
    return { y: backend.run(matmul, [a, b, c], attrs)[0]!, expected: expected as Float32Array };
  }
  const { beta: _, ...batchedAttrs } = attrs;
  const io = inferKernel(batchedMatmul, metas, batchedAttrs);
  const expected = batchedMatmul.reference(values.slice(0, 2), io.attrs, {
    inputs: metas,
    outputs: io.outputs,
  })[0];
  return { y: backend.run(batchedMatmul, [a, b], batchedAttrs)[0]!, expected: expected as Float32Array };
}
