import { type AssemblyJob, expectAllAssembleCleanly } from '@rayo/cuda-testkit';
import { describe, it } from 'vitest';
import { ptxasTestGate } from '../ptx/ptxas.js';
import { DEFAULT_TARGET } from '../ptx/target.js';
import { flashDkdvModule, flashDqModule, flashForwardModule } from './flashAttentionRows.js';

const gate = ptxasTestGate();

describe.skipIf(gate.skip)(
  `flash attention PTX assembles with ptxas, without spills (${gate.reason})`,
  () => {
    it('forward, dq and dk and dv at head dims 7, 64 and 128', () => {
      const jobs: AssemblyJob[] = [];
      for (const [name, module] of [
        ['forward', flashForwardModule],
        ['dq', flashDqModule],
        ['dk and dv', flashDkdvModule],
      ] as const) {
        for (const hd of [7, 64, 128]) {
          const ptx = module(hd).emit();
          for (const arch of ['sm_90', DEFAULT_TARGET])
            jobs.push({ ptx, arch, what: `${name} d${hd} ${arch}` });
        }
      }
      expectAllAssembleCleanly(jobs);
    }, 120_000);
  },
);
