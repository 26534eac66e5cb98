import { embedding, embeddingBackward } from '@rayo/core';
import { compareOutputs } from '@rayo/core/testing';
import {
  type AssemblyJob,
  expectAllAssembleCleanly,
  itAssemblesForBothTargets,
  seededUniform,
  useEmulatedGpu,
} from '@rayo/cuda-testkit';
import { describe, expect, it } from 'vitest';
import { aligned, offByOne } from '../../testing/alignedOperands.js';
import { ptxasTestGate } from '../ptx/ptxas.js';
import { DEFAULT_TARGET } from '../ptx/target.js';
import {
  embeddingGeometry,
  embeddingKey,
  embeddingModule,
  embeddingPoisonModule,
  embeddingScatterModule,
} from './embedding.js';

describe('embedding kernels', () => {
  it('gives each row as many lanes as it has accesses, up to a warp', () => {
    expect(embeddingGeometry(1, [aligned])).toMatchObject({ threads: 1, width: 1 });
    expect(embeddingGeometry(8, [aligned])).toMatchObject({ threads: 2, width: 4 });
    expect(embeddingGeometry(13, [aligned])).toMatchObject({ threads: 16, width: 1 });
    expect(embeddingGeometry(4096, [aligned])).toMatchObject({ threads: 32, width: 4 });
    expect(embeddingGeometry(4096, [aligned, offByOne])).toMatchObject({ threads: 32, width: 1 });
    expect(embeddingKey(embeddingGeometry(4096, [aligned]))).toBe('embedding/gather/t32b128w4stream');
  });

  it('compares ids as unsigned, so that negative ids are out of range too', () => {
    const text = embeddingModule(embeddingGeometry(8, [aligned])).emit();
    expect(text).toMatch(/setp\.lo\.u32/);
    expect(text).not.toMatch(/\.s32/);
  });

  it('adds gradient rows with atomics and poisons the table only when flagged', () => {
    expect(embeddingScatterModule(embeddingGeometry(8, [aligned])).emit()).toMatch(/red\.global\.add\.f32/);
    expect(embeddingPoisonModule().emit()).toMatch(/setp\.ne\.u32/);
  });
});

const gate = ptxasTestGate();

describe.skipIf(gate.skip)(`embedding PTX assembles with ptxas (${gate.reason})`, () => {
  for (const [dim, operands] of [
    [1, [aligned]],
    [13, [aligned]],
    [8, [aligned]],
    [4096, [aligned]],
    [4096, [offByOne]],
  ] as const) {
    const g = embeddingGeometry(dim, operands);
    it(`gather and scatter for D = ${dim}, ${embeddingKey(g)}, on sm_90 and ${DEFAULT_TARGET}`, () => {
      const jobs: AssemblyJob[] = [];
      for (const build of [embeddingModule, embeddingScatterModule]) {
        for (const arch of ['sm_90', DEFAULT_TARGET]) {
          jobs.push({ ptx: build(g).emit(), arch });
        }
      }
      // Half tables and gradients.
      for (const type of ['f16', 'bf16'] as const) {
        for (const arch of ['sm_90', DEFAULT_TARGET]) {
          jobs.push({ ptx: embeddingModule(g, type).emit(), arch });
          jobs.push({ ptx: embeddingScatterModule(g, type).emit(), arch });
        }
      }
      expectAllAssembleCleanly(jobs);
    });
  }
  itAssemblesForBothTargets('the poisoning', [['the poisoning', embeddingPoisonModule]]);
});

// With one SM the grids are a few blocks: every group loops over many rows,
// and the poisoning loops over a table many times its grid.
describe('embedding kernels on a one-SM emulated device', () => {
  const { gpu, cpu } = useEmulatedGpu({ multiprocessors: 1 });

  const uniform = seededUniform(5);

  async function check(rows: number, vocab: number, dim: number, badLast: boolean) {
    const ids = Int32Array.from({ length: rows }, () => Math.floor(uniform() * vocab));
    if (badLast) ids[rows - 1] = vocab;
    const table = Float32Array.from({ length: vocab * dim }, () => uniform() * 2 - 1);
    const dy = Float32Array.from({ length: rows * dim }, () => uniform() * 2 - 1);
    const forward = (b: typeof gpu | typeof cpu) =>
      b.run(embedding, [b.upload(table, [vocab, dim]), b.upload(ids, [rows], 'i32')], {})[0]!.read();
    const backward = (b: typeof gpu | typeof cpu) =>
      b
        .run(embeddingBackward, [b.upload(dy, [rows, dim]), b.upload(ids, [rows], 'i32')], {
          vocabSize: vocab,
        })[0]!
        .read();
    expect(compareOutputs('f32', await forward(gpu), await forward(cpu))).toBeUndefined();
    expect(compareOutputs('f32', await backward(gpu), await backward(cpu))).toBeUndefined();
  }

  it('rows of 12 floats, many per block', () => check(700, 50, 12, false));
  it('an out-of-range id in the last row poisons all of a large table', () => check(300, 3000, 4, true));
});
