import { type AssemblyJob, archJobs, expectAllAssembleCleanly } from '@rayo/cuda-testkit';
import { describe, it } from 'vitest';
import type { PtxModule } from '../ptx/module.js';
import { ptxasTestGate } from '../ptx/ptxas.js';
import { DEFAULT_TARGET } from '../ptx/target.js';
import { NORM_DECLS, normKey, normModule } from './normalization.js';
import { columnSumsModule, largestPlannedGeometries, type RowGeometry } from './rowReduce.js';
import { SOFTMAX_DECLS, softmaxKey, softmaxModule } from './softmax.js';
import type { FloatStorage } from './storage.js';

/** A family of row kernels: its declarations, and the module and cache key of one at a geometry. */
interface RowFamily<D> {
  readonly name: string;
  readonly decls: readonly D[];
  readonly module: (d: D, g: RowGeometry, type?: FloatStorage) => PtxModule;
  readonly key: (d: D, g: RowGeometry, type?: FloatStorage) => string;
}

const gate = ptxasTestGate();

function describeAssembly<D extends { readonly spec: { readonly name: string }; readonly registers: number }>(
  family: RowFamily<D>,
  more?: () => void,
): void {
  describe.skipIf(gate.skip)(
    `${family.name} PTX assembles with ptxas, without spills (${gate.reason})`,
    () => {
      for (const d of family.decls) {
        it(`${d.spec.name} at the largest geometry of each kind`, () => {
          // Every kind of geometry the planner gives this kernel, at its most slots (most registers),
          // assembled in few ptxas runs (one module at a time where a run is not clean).
          const jobs: AssemblyJob[] = [];
          for (const g of largestPlannedGeometries(d.registers)) {
            jobs.push(...archJobs(family.module(d, g).emit(), family.key(d, g)));
            for (const type of ['f16', 'bf16'] as const) {
              jobs.push({
                ptx: family.module(d, g, type).emit(),
                arch: 'sm_90',
                what: family.key(d, g, type),
              });
            }
          }
          expectAllAssembleCleanly(jobs);
        });
      }
      more?.();
    },
  );
}

describeAssembly({ name: 'normalization', decls: NORM_DECLS, module: normModule, key: normKey }, () => {
  it('rmsNorm writing another dtype than it reads (attrs.out)', () => {
    const rms = NORM_DECLS.find((d) => d.spec.name === 'rmsNorm')!;
    const jobs: AssemblyJob[] = largestPlannedGeometries(rms.registers).flatMap((g) =>
      (
        [
          ['f32', 'bf16'],
          ['bf16', 'f32'],
        ] as const
      ).map(([type, out]) => ({
        ptx: normModule(rms, g, type, out).emit(),
        arch: 'sm_90',
        what: normKey(rms, g, type, out),
      })),
    );
    expectAllAssembleCleanly(jobs);
  });
  it('column sums', () => {
    expectAllAssembleCleanly(
      ['sm_90', DEFAULT_TARGET].flatMap((arch) =>
        (['f32', 'f16', 'bf16'] as const).map((type) => ({ ptx: columnSumsModule(type).emit(), arch })),
      ),
    );
  });
});
describeAssembly({ name: 'softmax', decls: SOFTMAX_DECLS, module: softmaxModule, key: softmaxKey });
