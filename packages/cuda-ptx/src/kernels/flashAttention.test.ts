import { expectAssemblesCleanly } from '@rayo/cuda-testkit';
import { describe, it } from 'vitest';
import { ptxasTestGate } from '../ptx/ptxas.js';
import { DEFAULT_TARGET } from '../ptx/target.js';
import { flashDkdvModule, flashDqModule, flashForwardModule } from './flashAttentionRows.js';

const gate = ptxasTestGate();

describe.skipIf(gate.skip)(
  `flash attention PTX assembles with ptxas, without spills (${gate.reason})`,
  () => {
    for (const [name, module] of [
      ['forward', flashForwardModule],
      ['dq', flashDqModule],
      ['dk and dv', flashDkdvModule],
    ] as const) {
      it(`${name} at head dims 7, 64 and 128`, () => {
        for (const hd of [7, 64, 128]) {
          for (const arch of ['sm_90', DEFAULT_TARGET])
            expectAssemblesCleanly(module(hd).emit(), arch, `${name} d${hd} ${arch}`);
        }
      }, 60_000);
    }
  },
);
