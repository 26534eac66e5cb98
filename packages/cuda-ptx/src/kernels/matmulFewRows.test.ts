import { expectAllAssembleCleanly } from '@rayo/cuda-testkit';
import { describe, it } from 'vitest';
import { ptxasTestGate } from '../ptx/ptxas.js';
import { type FewRowsVariant, fewRowsKey, fewRowsModule } from './matmulFewRows.js';

const gate = ptxasTestGate();

describe.skipIf(gate.skip)(`the few-rows tensor-core product under ptxas (${gate.reason})`, () => {
  const variants: FewRowsVariant[] = [
    { dtype: 'bf16', aF32: false, withC: false, out: 'f32' },
    { dtype: 'bf16', aF32: true, withC: true, out: 'f32' },
    { dtype: 'f16', aF32: false, withC: true, out: 'f16' },
    { dtype: 'f16', aF32: true, withC: false, out: 'f16' },
  ];

  it('assembles for sm_80 and sm_90 without spills, two blocks an SM', () => {
    expectAllAssembleCleanly(
      variants.flatMap((v) => {
        const ptx = fewRowsModule(v).emit();
        return ['sm_80', 'sm_90'].map((arch) => ({
          ptx,
          arch,
          what: `${fewRowsKey(v)} ${arch}`,
          maxRegisters: 128,
        }));
      }),
    );
  }, 300_000);
});
