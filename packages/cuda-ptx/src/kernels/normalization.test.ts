import { layerNormBackward, rmsNormBackward, type Tensor } from '@rayo/core';
import { compareOutputs } from '@rayo/core/testing';
import { recordingEncoder, seededUniform, useEmulatedGpu } from '@rayo/cuda-testkit';
import { describe, expect, it } from 'vitest';
import type { DeviceProperties } from '../driver/driver.js';
import { NORM_DECLS, NORMALIZATION_KERNELS, normGeometry } from './normalization.js';
import { COLUMN_SUMS_KEY } from './rowReduce.js';

const H100 = { multiprocessors: 132, maxThreadsPerMultiprocessor: 2048 } as DeviceProperties;
const ALIGNED = [1n << 30n, 2n << 30n, 3n << 30n, 4n << 30n];
const decl = (name: string) => NORM_DECLS.find((d) => d.spec.name === name)!;

function operand(ptr: bigint, shape: number[]) {
  const size = shape.reduce((a, b) => a * b, 1);
  return { ptr, shape, size, dtype: 'f32' as const, byteLength: size * 4 };
}

/** Records what a kernel launches, fills and allocates. */
function record(name: string, shapes: number[][], outShapes: number[][]) {
  const { encoder, launches, fills } = recordingEncoder(H100, 1n << 40n);
  const inputs = shapes.map((s, i) => operand(BigInt(i + 1) << 30n, s));
  const outputs = outShapes.map((s, i) => operand(BigInt(i + 8) << 30n, s));
  const kernel = NORMALIZATION_KERNELS.find((k) => k.spec.name === name)!;
  kernel.launch(encoder, {
    inputs,
    outputs,
    attrs: { eps: 1e-5 },
    io: { inputs: shapes.map((shape) => ({ shape, dtype: 'f32' })), outputs: [] },
  } as never);
  return { launches, fills };
}

describe('normalization kernels', () => {
  it('keeps fewer elements per thread in registers where the backward also holds column sums', () => {
    expect(normGeometry(decl('rmsNorm'), 4096, ALIGNED)).toEqual({
      threads: 256,
      block: 256,
      width: 4,
      slots: 4,
    });
    expect(normGeometry(decl('layerNormBackward'), 4096, ALIGNED)).toEqual({
      threads: 512,
      block: 512,
      width: 4,
      slots: 2,
    });
    expect(normGeometry(decl('layerNormBackward'), 32768, ALIGNED).slots).toBe(0);
    expect(normGeometry(decl('rmsNorm'), 97, ALIGNED)).toEqual({
      threads: 32,
      block: 128,
      width: 1,
      slots: 4,
    });
  });

  it('sums parameter gradients on the device: per-block partials, then one column-sum pass per output', () => {
    const { launches, fills } = record(
      'layerNormBackward',
      [[1031, 96], [1031, 96], [96]],
      [[1031, 96], [96], [96]],
    );
    expect(launches.map((l) => l.key)).toEqual([
      expect.stringMatching(/^normalization\/layerNormBackward\/t32b128w4s/),
      COLUMN_SUMS_KEY,
      COLUMN_SUMS_KEY,
    ]);
    const grid = launches[0]!.grid as number;
    expect(grid).toBeLessThanOrEqual(Math.ceil(1031 / 4));
    const partials = launches[0]!.args.partials as bigint;
    expect(launches[1]!.args).toMatchObject({ partials, parts: grid, n: 96 });
    expect(launches[2]!.args).toMatchObject({ partials: partials + BigInt(grid * 96 * 4), parts: grid });
    // Cached geometries write their partials whole: nothing to zero first.
    expect(fills).toEqual([]);
  });

  it('zeroes the partials that streamed rows add into, and the gradients of no rows', () => {
    const streamed = record('rmsNormBackward', [[3, 40000], [3, 40000], [40000]], [[3, 40000], [40000]]);
    expect(streamed.launches[0]!.key).toMatch(/stream$/);
    expect(streamed.fills).toEqual([[streamed.launches[0]!.args.partials, 0, 3 * 40000]]);
    const empty = record('rmsNormBackward', [[0, 5], [0, 5], [5]], [[0, 5], [5]]);
    expect(empty.launches).toEqual([]);
    expect(empty.fills).toEqual([[9n << 30n, 0, 5]]);
  });
});

// Many rows: the column-sum pass adds 258 partial rows, each thread several passes of
// COLUMN_UNROLL rows and a remainder, against the reference on fresh random inputs.
describe('parameter gradients over many rows on an emulated device', () => {
  const { fake, gpu, cpu } = useEmulatedGpu({ multiprocessors: 132 });
  const uniform = seededUniform(41, -1, 1);
  const random = (count: number) => Float32Array.from({ length: count }, uniform);
  for (const spec of [rmsNormBackward, layerNormBackward]) {
    it(`${spec.name} 1031 × 96`, async () => {
      const shapes = [[1031, 96], [1031, 96], [96]];
      const data = shapes.map((shape) => random(shape.reduce((a, b) => a * b, 1)));
      const first = fake.launches.length;
      const got = gpu.run(
        spec,
        data.map((d, i) => gpu.upload(d, shapes[i]!)),
        { eps: 1e-5 },
      ) as Tensor[];
      const want = cpu.run(
        spec,
        data.map((d, i) => cpu.upload(d, shapes[i]!)),
        { eps: 1e-5 },
      ) as Tensor[];
      const parts = fake.launches.slice(first).find((l) => l.entry === 'column_sums')!.args.parts;
      expect(parts).toBeGreaterThan(32 * 4);
      for (const [i, w] of want.entries()) {
        const tolerance = { rtol: 1e-4, atol: i === 0 ? 1e-5 : 1e-4 };
        expect(compareOutputs('f32', await got[i]!.read(), await w.read(), tolerance)).toBeUndefined();
      }
    }, 120_000);
  }
});
