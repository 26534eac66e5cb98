import {
  batchedMatmul,
  cast,
  createCpuBackend,
  type MatmulLaunch,
  matmul,
  sizeOf,
  type Tensor,
  toHostArray,
} from '@rayo/core';
import { compareOutputs } from '@rayo/core/testing';
import {
  CommandRecorder,
  CU_DEVICE_ATTRIBUTE,
  CudaDriver,
  type DeviceBuffer,
  type Operand,
} from '@rayo/cuda-ptx';
import { afterAll, expect } from 'vitest';
import { FakeLibCuda } from './fakeLibCuda.js';
import { PtxInterpreter } from './ptxInterpreter.js';
import { seededUniform } from './seededUniform.js';

/** Unit roundoff of the reduced-precision inputs (tf32 as the f32 operands of precision 'tf32'). */
export const GEMM_UNIT = { f16: 2 ** -11, bf16: 2 ** -8, tf32: 2 ** -11 } as const;
/** A quiet NaN in each half dtype: what an output holds before the run. */
export const HALF_POISON = { f16: 0x7e00, bf16: 0x7fc0 } as const;
/** [transA, transB] of every layout. */
export const LAYOUTS = [
  [false, false],
  [false, true],
  [true, false],
  [true, true],
] as const;

/**
 * An interpreted (sm_90) device for the GEMM kernels' tests: its driver and
 * stream, the cpu reference, seeded values in [-1, 1) and uploads as
 * operands, all freed after the suite; `multiprocessors` shrinks the device
 * so that persistent kernels loop over several tiles a block.
 */
export function useGemmDevice(seed: number, multiprocessors?: number) {
  const fake = new FakeLibCuda();
  if (multiprocessors !== undefined)
    fake.attributes.set(CU_DEVICE_ATTRIBUTE.MULTIPROCESSOR_COUNT, multiprocessors);
  new PtxInterpreter(fake).attach();
  const driver = new CudaDriver(fake);
  const stream = driver.createStream();
  const cpu = createCpuBackend();
  const buffers: DeviceBuffer[] = [];
  afterAll(() => {
    for (const b of buffers) driver.free(b);
    cpu.dispose();
  });
  const uniform = seededUniform(seed, -1, 1);
  const random = (n: number) => Array.from({ length: n }, uniform);
  const operand = (
    h: Uint16Array | Float32Array,
    shape: number[],
    dtype: 'f16' | 'bf16' | 'f32',
  ): Operand => {
    const buffer = driver.alloc(Math.max(h.byteLength, 16));
    buffers.push(buffer);
    driver.copyHtoD(buffer.ptr, h, h.byteLength);
    return { ptr: buffer.ptr, size: h.length, shape, dtype, byteLength: h.byteLength };
  };

  /**
   * y = alpha · op(a) · op(b) (+ beta · c) for each of `batch` products as
   * `encode` records it, on random inputs and y poisoned first, against the
   * cpu backend within the conformance bound for reduced-precision products,
   * max(1e-3, 4·u·√K). tf32 runs f32 operands; `out: 'f32'` half a and b
   * with f32 c and y, against the f32 product of a and b widened.
   */
  async function product(
    v: {
      dtype: keyof typeof GEMM_UNIT;
      transA: boolean;
      transB: boolean;
      withC: boolean;
      out?: 'f32';
    },
    [m, k, n]: readonly [number, number, number],
    { alpha = 1, beta = 1, batch = 1 }: { alpha?: number; beta?: number; batch?: number },
    encode: (recorder: CommandRecorder, call: MatmulLaunch<Operand>) => void,
  ): Promise<void> {
    const { dtype, transA, transB, withC } = v;
    const stored = dtype === 'tf32' ? 'f32' : dtype;
    const shapes = [transA ? [k, m] : [m, k], transB ? [n, k] : [k, n], [m, n]].map((s) =>
      batch > 1 ? [batch, ...s] : s,
    );
    const out = v.out ?? stored;
    // a, b in the operands' dtype; c in the output's.
    const dtypes = [stored, stored, out] as const;
    const host = shapes.map((s, i) =>
      dtypes[i] === 'f32'
        ? Float32Array.from(random(sizeOf(s)))
        : (toHostArray(stored, random(sizeOf(s))) as Uint16Array),
    );
    const [a, b, c] = host.map((h, i) => operand(h, shapes[i]!, dtypes[i]!));
    const poison =
      out === 'f32'
        ? new Float32Array(batch * m * n).fill(Number.NaN)
        : new Uint16Array(batch * m * n).fill(HALF_POISON[out]);
    const y = operand(poison, shapes[2]!, out);
    const recorder = new CommandRecorder(driver);
    encode(recorder, {
      a: a!,
      b: b!,
      c: withC ? c : undefined,
      y,
      batch,
      m,
      n,
      k,
      transA,
      transB,
      alpha,
      beta,
    });
    driver.enqueue(recorder.commands, stream);
    driver.synchronize(stream);
    for (const buffer of recorder.scratchBuffers) driver.free(buffer);
    const got = out === 'f32' ? new Float32Array(batch * m * n) : new Uint16Array(batch * m * n);
    driver.copyDtoH(got, y.ptr, got.byteLength);
    // An f32 output is checked against the f32 product of the half values widened (exactly).
    const ins = host.slice(0, withC ? 3 : 2).map((h, i) => {
      const t = cpu.upload(h, shapes[i]!, dtypes[i]!);
      if (t.dtype === out) return t;
      const wide = cpu.run(cast, [t], { to: out })[0]!;
      t.dispose();
      return wide;
    });
    const [want] = (
      batch > 1
        ? cpu.run(batchedMatmul, ins, { alpha, transA, transB })
        : cpu.run(matmul, ins, { alpha, beta, transA, transB })
    ) as Tensor[];
    const tol = Math.max(1e-3, 4 * GEMM_UNIT[dtype] * Math.sqrt(k));
    expect(compareOutputs(out, got, await want!.read(), { rtol: tol, atol: tol })).toBeUndefined();
    for (const t of [...ins, want!]) t.dispose();
  }

  return { fake, driver, stream, cpu, random, operand, product };
}
