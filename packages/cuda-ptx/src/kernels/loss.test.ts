import { crossEntropy, crossEntropyBackward } from '@rayo/core';
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
  CROSS_ENTROPY_MEAN_KEY,
  crossEntropyBackwardModule,
  crossEntropyMeanModule,
  crossEntropyRowsKey,
  crossEntropyRowsModule,
  lossGeometry,
} from './loss.js';

describe('loss kernels', () => {
  it('gives short rows part of a warp and long vocabulary rows a block', () => {
    const short = lossGeometry(10, [aligned]);
    expect(short.threads).toBeLessThanOrEqual(32);
    expect(short.block % short.threads).toBe(0);
    const vocab = lossGeometry(50_257, [aligned]);
    expect(vocab.threads).toBe(vocab.block);
    // 50 257 is odd: one float per access, streamed (too long to keep in registers).
    expect(vocab.width).toBe(1);
    expect(vocab.slots).toBe(0);
    expect(lossGeometry(32_000, [aligned]).width).toBe(4);
    expect(lossGeometry(32_000, [aligned, offByOne]).width).toBe(1);
  });

  it('names modules by geometry', () => {
    expect(crossEntropyRowsKey({ threads: 32, block: 128, width: 4, slots: 2 })).toBe(
      'loss/crossEntropy/rows/t32b128w4s2',
    );
    expect(CROSS_ENTROPY_MEAN_KEY).toMatch(/^loss\/crossEntropy\/mean\//);
  });

  it('reduces with shuffles within a warp and through shared memory across a block', () => {
    const warp = crossEntropyRowsModule(lossGeometry(64, [aligned])).emit();
    expect(warp).toContain('shfl.sync.bfly.b32');
    expect(warp).not.toContain('bar.sync');
    const block = crossEntropyBackwardModule(lossGeometry(50_000, [aligned])).emit();
    expect(block).toContain('bar.sync');
    // No float atomics: the loss and its gradient are deterministic.
    expect(block).not.toMatch(/^\s*(@%p\d+ )?(atom|red)\./m);
  });
});

const gate = ptxasTestGate();

describe.skipIf(gate.skip)(`loss PTX assembles with ptxas (${gate.reason})`, () => {
  for (const classes of [3, 10, 64, 1031, 4096, 50_000, 50_257]) {
    const g = lossGeometry(classes, [aligned]);
    it(`crossEntropy and its backward for ${classes} classes (${crossEntropyRowsKey(g)}) on sm_90 and ${DEFAULT_TARGET}`, () => {
      const jobs: AssemblyJob[] = [];
      for (const build of [crossEntropyRowsModule, crossEntropyBackwardModule]) {
        for (const arch of ['sm_90', DEFAULT_TARGET]) {
          for (const type of ['f32', 'f16', 'bf16'] as const) jobs.push({ ptx: build(g, type).emit(), arch });
        }
      }
      expectAllAssembleCleanly(jobs);
    });
  }
  itAssemblesForBothTargets('the mean', [['the mean', crossEntropyMeanModule]]);
});

// The conformance suite's class counts (1, 3, 10, 1031) never divide by 4
// and none streams; these cover `.v4` rows, streamed vocabulary rows and
// the infinities the online log-sum-exp must handle as the reference does.
describe('cross-entropy on an emulated device', () => {
  const { gpu, cpu } = useEmulatedGpu();

  const uniform = seededUniform(11);

  async function check(rows: number, classes: number, edit?: (logits: Float32Array) => void) {
    const logits = Float32Array.from({ length: rows * classes }, () => uniform() * 8 - 4);
    edit?.(logits);
    const targets = Int32Array.from({ length: rows }, () => Math.floor(uniform() * classes));
    const dloss = Float32Array.of(0.75);
    for (const spec of [crossEntropy, crossEntropyBackward]) {
      const run = (b: typeof gpu | typeof cpu) => {
        const inputs = [b.upload(logits, [rows, classes]), b.upload(targets, [rows], 'i32')];
        if (spec === crossEntropyBackward) inputs.push(b.upload(dloss, []));
        return b.run(spec, inputs, {})[0]!.read();
      };
      const tolerance = spec === crossEntropy ? {} : { rtol: 1e-5, atol: 1e-9 };
      expect(compareOutputs('f32', await run(gpu), await run(cpu), tolerance), spec.name).toBeUndefined();
    }
  }

  it('rows of 64 classes, four per access, several rows per warp', () => check(37, 64));
  it('rows of 4096 classes, a block each', () => check(5, 4096));
  it('rows of 40 001 classes, streamed one float per access', () => check(2, 40_001));
  it('−inf, +inf and NaN logits, and a row of only −inf', () =>
    check(5, 64, (x) => {
      x[3] = Number.NEGATIVE_INFINITY;
      x[64 + 10] = Number.POSITIVE_INFINITY;
      x[128 + 5] = Number.NaN;
      x.fill(Number.NEGATIVE_INFINITY, 192, 256);
    }));
});
