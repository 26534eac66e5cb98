import {
  type AnyKernelSpec,
  createCpuBackend,
  layerNorm,
  layerNormBackward,
  logSoftmax,
  logSoftmaxBackward,
  max,
  rmsNorm,
  rmsNormBackward,
  type Shape,
  softmax,
  softmaxBackward,
  sum,
  sumSquares,
} from '@rayo/core';
import { compareOutputs, type Tolerance } from '@rayo/core/testing';
import { createEmulatedGpu, seededUniform } from '@rayo/cuda-testkit';
import { afterAll, describe, expect, it } from 'vitest';
import type { CudaBackend } from '../backend.js';
import type { DeviceProperties } from '../driver/driver.js';
import {
  accessWidth,
  geometryKey,
  largestPlannedGeometries,
  planRows,
  ROW_REGISTER_BUDGET,
  rowGrid,
  STREAM_BLOCK,
} from './rowReduce.js';

const H100 = { multiprocessors: 132, maxThreadsPerMultiprocessor: 2048 } as DeviceProperties;

describe('row geometry planning', () => {
  it('takes the widest access every row start and pointer allows', () => {
    expect(accessWidth(64, [0x1000n, 0x2000n])).toBe(4);
    expect(accessWidth(64, [0x1000n, 0x2008n])).toBe(2);
    expect(accessWidth(66, [0x1000n])).toBe(2);
    expect(accessWidth(63, [0x1000n])).toBe(1);
    expect(accessWidth(64, [0x1004n])).toBe(1);
  });

  it('gives short rows a part of a warp, with one access per thread', () => {
    expect(planRows(1, 1, 1)).toEqual({ threads: 1, block: 128, width: 1, slots: 1 });
    expect(planRows(13, 1, 1)).toEqual({ threads: 16, block: 128, width: 1, slots: 1 });
    expect(planRows(96, 4, 1)).toEqual({ threads: 32, block: 128, width: 4, slots: 1 });
  });

  it('holds every planned row in registers within the budget, else streams it', () => {
    for (const floats of [1, 2, 3, 4]) {
      for (const width of [1, 2, 4] as const) {
        for (const n of [width, 7 * width, 1000 * width, 3000 * width, 20_000 * width]) {
          const g = planRows(n, width, floats);
          if (g.slots === 0) {
            expect(g.threads).toBe(STREAM_BLOCK);
            continue;
          }
          expect(g.slots * g.threads * g.width, `${n} ${geometryKey(g)}`).toBeGreaterThanOrEqual(n);
          expect(g.slots * (floats * width + 1)).toBeLessThanOrEqual(
            Math.max(ROW_REGISTER_BUDGET, floats * width + 1),
          );
          expect(g.threads <= 32 || g.threads === g.block).toBe(true);
        }
      }
    }
  });

  it('lists each kind of planned geometry once, at its most slots', () => {
    const list = largestPlannedGeometries(2);
    const keys = list.map(geometryKey);
    expect(new Set(keys).size).toBe(keys.length);
    expect(keys).toContain('t32b128w4s4');
    expect(keys).toContain('t512b512w4s4');
    expect(keys).toContain('t512b512w4stream');
  });

  it('fills the device with blocks, never more than there are rows', () => {
    const warpRows = planRows(96, 4, 1);
    expect(rowGrid(H100, warpRows, 10)).toBe(3);
    expect(rowGrid(H100, warpRows, 1000)).toBe(Math.ceil(1000 / 4));
    expect(rowGrid(H100, warpRows, 10_000_000)).toBe(132 * 16);
    expect(rowGrid(H100, planRows(4096, 4, 1), 10_000_000, 0.5)).toBe(132 * 4);
  });
});

// ---- kernels on the emulated device, beyond the conformance suite's cases ----------

/** A backend on the fake device whose launches run in the PTX interpreter. */
function emulatedBackend(multiprocessors?: number): CudaBackend {
  return createEmulatedGpu({ memoryLimit: 2 ** 30, ...(multiprocessors ? { multiprocessors } : {}) }).gpu;
}

/** An input: its shape (random values), or its shape and values. */
type Input = Shape | readonly [Shape, Float32Array];
type Case = [string, AnyKernelSpec, Input[], Record<string, unknown>?, Tolerance?];

function uniform(shape: Shape, seed: number, lo = -2, hi = 2): Float32Array {
  return Float32Array.from({ length: shape.reduce((a, b) => a * b, 1) }, seededUniform(seed, lo, hi));
}

function checkCases(name: string, gpu: () => CudaBackend, cases: readonly Case[]): void {
  describe(name, () => {
    const cpu = createCpuBackend();
    let backend: CudaBackend | undefined;
    afterAll(() => backend?.dispose());
    for (const [label, spec, inputs, attrs = {}, tolerance = { rtol: 1e-4, atol: 1e-5 }] of cases) {
      it(`${spec.name} ${label}`, async () => {
        backend ??= gpu();
        const given = (x: Input) => x.length === 2 && x[1] instanceof Float32Array;
        const shapes = inputs.map((x) => (given(x) ? (x[0] as Shape) : (x as Shape)));
        const data = inputs.map((x, i) => (given(x) ? (x[1] as Float32Array) : uniform(x as Shape, 7 + i)));
        const ins = data.map((d, i) => backend!.upload(d, shapes[i]!));
        const refs = data.map((d, i) => cpu.upload(d, shapes[i]!));
        const outs = backend.run(spec, ins, attrs);
        const expected = cpu.run(spec, refs, attrs);
        for (let i = 0; i < outs.length; i++) {
          const mismatch = compareOutputs('f32', await outs[i]!.read(), await expected[i]!.read(), tolerance);
          expect(mismatch, `output ${i}`).toBeUndefined();
        }
        for (const t of [...ins, ...refs, ...outs, ...expected]) t.dispose();
      }, 120_000);
    }
  });
}

const BIG = { rtol: 1e-4, atol: 1e-3 };

// Rows longer than registers hold: re-read at every pass, column sums added up in memory.
checkCases('streamed rows', () => emulatedBackend(), [
  ['[2, 8200]', softmax, [[2, 8200]]],
  ['[2, 16400]', logSoftmax, [[2, 16400]]],
  [
    '[2, 8200]',
    softmaxBackward,
    [
      [2, 8200],
      [2, 8200],
    ],
  ],
  [
    '[2, 16400]',
    logSoftmaxBackward,
    [
      [2, 16400],
      [2, 16400],
    ],
  ],
  ['[2, 16400]', rmsNorm, [[2, 16400], [16400]]],
  ['[2, 16400]', layerNorm, [[2, 16400], [16400], [16400]]],
  ['[3, 5000]', rmsNormBackward, [[3, 5000], [3, 5000], [5000]]],
  ['[3, 5000]', layerNormBackward, [[3, 5000], [3, 5000], [5000]]],
]);

// With one SM the grids are small: groups loop over many rows and blocks sum many rows per column.
checkCases('one SM: many rows per block', () => emulatedBackend(1), [
  ['[300, 70]', softmax, [[300, 70]]],
  ['[50, 1030]', logSoftmax, [[50, 1030]]],
  ['[1000, 24]', rmsNormBackward, [[1000, 24], [1000, 24], [24]], {}, BIG],
  ['[200, 13]', layerNormBackward, [[200, 13], [200, 13], [13]], {}, BIG],
  ['[40, 640]', layerNormBackward, [[40, 640], [40, 640], [640]], {}, BIG],
  ['[5, 70000] over the last axis', sum, [[5, 70_000]], { axis: 'last' }, BIG],
  ['[3, 4099] over everything', sumSquares, [[3, 4099]], { axis: 'all' }, BIG],
  ['[2000, 5] over the last axis', max, [[2000, 5]], { axis: 'last' }],
]);

/** 4 rows of `n` halves, with NaN, −inf and +inf written at the start of rows 0, 1 and 3 and all of row 2 −inf. */
function special(n: number): [Shape, Float32Array] {
  const x = new Float32Array(4 * n).fill(0.5);
  x[0] = Number.NaN;
  x.set([Number.NEGATIVE_INFINITY, 2], n);
  x.fill(Number.NEGATIVE_INFINITY, 2 * n, 3 * n);
  x[3 * n] = Number.POSITIVE_INFINITY;
  return [[4, n], x];
}

// NaN and infinities as the reference has them: NaN wins a max; an all −inf
// row is NaN after softmax; +inf makes its row NaN; a −inf logit gets 0.
checkCases('NaN and infinities', () => emulatedBackend(), [
  ['of [4, 37] over the last axis', max, [special(37)], { axis: 'last' }],
  ['of [4, 4000] over the last axis', max, [special(4000)], { axis: 'last' }],
  ['of [4, 4000] over everything', max, [special(4000)], { axis: 'all' }],
  ['of [4, 37] over the last axis', sum, [special(37)], { axis: 'last' }],
  ['of [4, 37] over everything', sumSquares, [special(37)], { axis: 'all' }],
  ['of [4, 37]', softmax, [special(37)]],
  ['of [4, 2000]', logSoftmax, [special(2000)]],
  ['of [4, 37]', rmsNorm, [special(37), [37]]],
  ['of [4, 37]', layerNorm, [special(37), [37], [37]]],
]);
