import { CAST_DTYPES } from '@rayo/core';
import { expectAllAssembleCleanly } from '@rayo/cuda-testkit';
import { describe, expect, it } from 'vitest';
import { ptxasTestGate } from '../ptx/ptxas.js';
import { DEFAULT_TARGET } from '../ptx/target.js';
import { CAST_KERNELS, castModule } from './cast.js';

describe('cast kernels', () => {
  it('runs cast in every float dtype', () => {
    expect(CAST_KERNELS.map((k) => [k.spec.name, k.dtypes])).toEqual([['cast', ['f32', 'f16', 'bf16']]]);
  });

  it('rounds f16 with cvt.rn and bf16 with integer code, so the default target suffices', () => {
    expect(castModule('f32', 'f16').emit()).toContain('cvt.rn.f16.f32');
    expect(castModule('f16', 'f32').emit()).toContain('cvt.f32.f16');
    const bf16 = castModule('f32', 'bf16').emit();
    expect(bf16).not.toMatch(/cvt[.a-z0-9]*bf16/);
    expect(bf16).toContain(`.target ${DEFAULT_TARGET}`);
    expect(bf16).toContain('st.global.b16');
  });
});

const gate = ptxasTestGate();

describe.skipIf(gate.skip)(`cast PTX assembles with ptxas (${gate.reason})`, () => {
  it(`every pair of dtypes for sm_90 and ${DEFAULT_TARGET}`, () => {
    expectAllAssembleCleanly(
      CAST_DTYPES.flatMap((from) =>
        CAST_DTYPES.flatMap((to) => {
          const ptx = castModule(from, to).emit();
          return ['sm_90', DEFAULT_TARGET].map((arch) => ({ ptx, arch, what: `${from} → ${to} on ${arch}` }));
        }),
      ),
    );
  }, 120_000);
});
