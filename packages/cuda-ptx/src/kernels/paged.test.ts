import { runConformanceCheck } from '@rayo/conformance';
import { conformanceSuite } from '@rayo/core/testing';
import { type AssemblyJob, createEmulatedGpu, expectAllAssembleCleanly } from '@rayo/cuda-testkit';
import { afterAll, describe, it } from 'vitest';
import { ptxasTestGate } from '../ptx/ptxas.js';
import { type AttentionConfig, attentionKey } from './attentionPlan.js';
import { attentionModule } from './incrementalAttention.js';
import { ropeScatterKey, ropeScatterModule } from './kvCache.js';
import { pagedWriteKey, pagedWriteModule } from './paged.js';

// The paged family's conformance cases on an emulated device of two SMs
// (emulated.test.ts samples one per variant): long sequences take the split
// pass and its merge, short ones one pass; then ptxas on the variants.

const emulated = createEmulatedGpu({ multiprocessors: 2 });
const suite = conformanceSuite({ create: () => emulated.gpu });
afterAll(() => emulated.dispose());

// Half variants of one case that takes the split pass and of the fused rope writes (a half
// pool read through a fused row's gaps); emulated.test.ts samples the others.
const HALF = /\((f16|bf16)( beside f32 activations)?\)$/;
const chosen = suite.checks.filter(
  (c) => c.group === 'paged' && (!HALF.test(c.name) || c.name.includes('1279') || c.name.includes('fused')),
);

describe('paged kernels on an emulated device', () => {
  for (const check of chosen) {
    it(check.name, (context) => runConformanceCheck(check, context), 120_000);
  }
});

const gate = ptxasTestGate();

describe.skipIf(gate.skip)(`paged kernels under ptxas (${gate.reason})`, () => {
  const attention: AttentionConfig[] = [
    { headDim: 64, width: 4, headsPerBlock: 4, unroll: 4, split: true, paged: true },
    { headDim: 64, width: 4, headsPerBlock: 4, unroll: 4, split: true, paged: true, pageShift: 4 },
    {
      headDim: 64,
      width: 4,
      headsPerBlock: 4,
      unroll: 4,
      split: false,
      paged: true,
      types: { act: 'f32', cache: 'bf16' },
    },
    {
      headDim: 128,
      width: 4,
      headsPerBlock: 4,
      unroll: 2,
      split: true,
      paged: true,
      types: { act: 'bf16', cache: 'bf16' },
    },
    { headDim: 80, width: 4, headsPerBlock: 2, unroll: 1, split: false, paged: true },
    {
      headDim: 7,
      width: 1,
      headsPerBlock: 3,
      unroll: 4,
      split: true,
      paged: true,
      types: { act: 'f16', cache: 'f16' },
    },
  ];
  it('assembles the paged attention (its last blocks merging) and the paged writes for sm_75 and sm_90 without spills', () => {
    const jobs: AssemblyJob[] = [];
    for (const arch of ['sm_75', 'sm_90']) {
      for (const c of attention) {
        jobs.push({ ptx: attentionModule(c).emit(), arch, what: `${attentionKey(c)} ${arch}` });
      }
      for (const types of [
        { rows: 'f32', cache: 'f32' },
        { rows: 'f32', cache: 'bf16' },
        { rows: 'f16', cache: 'f16' },
      ] as const) {
        for (const width of [1, 4] as const) {
          jobs.push({
            ptx: pagedWriteModule(width, types).emit(),
            arch,
            what: `${pagedWriteKey(width, types)} ${arch}`,
          });
        }
        for (const layout of ['half', 'interleaved'] as const) {
          for (const table of [false, true]) {
            for (const headsPerThread of [1, 4]) {
              const variant = { layout, types, table, paged: true, headsPerThread };
              jobs.push({
                ptx: ropeScatterModule(variant).emit(),
                arch,
                what: `${ropeScatterKey(variant)} ${arch}`,
              });
            }
          }
        }
      }
    }
    expectAllAssembleCleanly(jobs);
  }, 300_000);
});
