import { builderError, bulkPipeline, expectAssemblesCleanly } from '@rayo/cuda-testkit';
import { describe, expect, it } from 'vitest';
import type { KernelBuilder } from './kernel.js';
import { PtxModule } from './module.js';
import { ptxasTestGate } from './ptxas.js';

function lines(m: PtxModule): string[] {
  return m
    .emit()
    .split('\n')
    .map((l) => l.trim());
}

const misuse = (body: (k: KernelBuilder) => void, target = 'sm_90') => builderError(body, { target });

describe('mbarrier and bulk copies', () => {
  it('emits the pipeline instructions', () => {
    const text = lines(bulkPipeline());
    for (const expected of [
      '@%p0 mbarrier.init.shared::cta.b64 [barriers], 1;',
      '@%p0 mbarrier.init.shared::cta.b64 [barriers+8], 1;',
      '@%p0 fence.mbarrier_init.release.cluster;',
      'mbarrier.arrive.expect_tx.shared::cta.b64 _, [%r2], 512;',
      'cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%r4], [%rd4], 512, [%r2];',
    ]) {
      expect(text).toContain(expected);
    }
    const wait = text.findIndex((l) => l.startsWith('mbarrier.try_wait.parity.shared::cta.b64'));
    expect(text[wait - 1]).toMatch(/^\$L__mbarrier\d+_wait:$/);
    expect(text[wait + 1]).toBe(
      `@!${text[wait]!.split(' ')[1]!.slice(0, -1)} bra ${text[wait - 1]!.slice(0, -1)};`,
    );
    const m = new PtxModule({ target: 'sm_80' });
    m.entry('arrive', {}, (k) => {
      const bar = k.shared('bar', 8, 8);
      k.mbarrierInit(bar, k.ntid());
      k.mbarrierArrive(bar, { state: k.reg('u64') });
    });
    expect(lines(m)).toContain('mbarrier.arrive.shared::cta.b64 %rd0, [bar];');
  });

  it('checks targets, counts and sizes', () => {
    const e = misuse((k) => k.cpAsyncBulk(k.reg('u32'), k.reg('u64'), 512, k.reg('u32')), 'sm_80');
    expect([e.operation, e.expected]).toEqual([
      'KernelBuilder.cpAsyncBulk',
      '.target >= sm_90 and .version >= 8.0',
    ]);
    expect(misuse((k) => k.mbarrierArrive(k.reg('u32'), { expectTx: 16 }), 'sm_80').operation).toBe(
      'KernelBuilder.mbarrierArrive',
    );
    expect(misuse((k) => k.mbarrierTryWait(k.reg('pred'), k.reg('u32'), 0), 'sm_80').operation).toBe(
      'KernelBuilder.mbarrierTryWait',
    );
    const size = misuse((k) => k.cpAsyncBulk(k.reg('u32'), k.reg('u64'), 24, k.reg('u32')));
    expect([size.argument, size.expected]).toEqual(['bytes', 'a multiple of 16']);
    expect(misuse((k) => k.mbarrierInit(k.reg('u32'), 0)).argument).toBe('count');
    expect(misuse((k) => k.mbarrierTryWait(k.reg('pred'), k.reg('u32'), 2)).argument).toBe('parity');
    expect(misuse((k) => k.cpAsyncBulk(k.reg('u32'), k.reg('u32'), 16, k.reg('u32'))).argument).toBe(
      'src.base',
    );
  });
});

describe('bulk tensor copies and register budgets', () => {
  const tensorModule = () => {
    const m = new PtxModule({ target: 'sm_90a' });
    const smem = m.dynamicShared('smem', 1024);
    m.entry('tma', { map: 'tensorMap', n: 'u32' }, (k, p) => {
      const base = k.sharedAddress(smem);
      const bar = k.add('u32', k.reg('u32'), base, 8192);
      k.setmaxnreg('dec', 40);
      k.mbarrierInit(bar, 1);
      k.fenceMbarrierInit();
      k.mbarrierArrive(bar, { expectTx: 8192 });
      k.cpAsyncBulkTensor(base, k.tensorMapAddress(p.map), [k.ldParam(p.n), 0, 0], bar);
      k.mbarrierWait(bar, 0);
    });
    return m;
  };

  it('declares a tensor map by value and copies through its address', () => {
    const text = lines(tensorModule());
    expect(text).toContain('.param .align 64 .b8 tma_param_map[128],');
    expect(text).toContain('mov.u64 %rd0, tma_param_map;');
    expect(text).toContain('cvta.param.u64 %rd0, %rd0;');
    expect(text).toContain('setmaxnreg.dec.sync.aligned.u32 40;');
    expect(text.find((l) => l.startsWith('cp.async.bulk.tensor'))).toMatch(
      /^cp\.async\.bulk\.tensor\.3d\.shared::cluster\.global\.tile\.mbarrier::complete_tx::bytes \[%r0\], \[%rd0, \{%r\d+, 0, 0\}\], \[%r1\];$/,
    );
    expect(tensorModule().entries[0]!.params).toEqual([
      { name: 'map', type: 'tensorMap', bytes: 128 },
      { name: 'n', type: 'u32', bytes: 4 },
    ]);
  });

  it('checks targets, register counts, coordinates and parameter kinds', () => {
    const sm90 = misuse((k) => k.setmaxnreg('inc', 232));
    expect(sm90.expected).toBe('.target sm_90a');
    expect(misuse((k) => k.setmaxnreg('inc', 100), 'sm_90a').argument).toBe('count');
    expect(misuse((k) => k.setmaxnreg('dec', 16), 'sm_90a').argument).toBe('count');
    expect(misuse((k) => k.cpAsyncBulkTensor(k.reg('u32'), k.reg('u64'), [], k.reg('u32'))).argument).toBe(
      'coords',
    );
    const m = new PtxModule({ target: 'sm_90a' });
    expect(() => m.entry('k', { map: 'tensorMap' }, (k, p) => k.ldParam(p.map as never))).toThrow(
      /not loaded into a register/,
    );
  });

  it.skipIf(ptxasTestGate().skip)('assembles for sm_90a', () => {
    expectAssemblesCleanly(tensorModule().emit(), 'sm_90a');
  });
});

const gate = ptxasTestGate();

describe.skipIf(gate.skip)(`the bulk-copy pipeline assembles with ptxas (${gate.reason})`, () => {
  for (const arch of ['sm_90', 'sm_90a']) {
    it(`-arch=${arch}`, () => {
      expectAssemblesCleanly(bulkPipeline(arch).emit(), arch);
    });
  }
});
