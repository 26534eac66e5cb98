import { CudaDriver } from '@rayo/cuda-ptx';
import { FakeLibCuda, PtxInterpreter } from '@rayo/cuda-testkit';
import { describe, expect, it } from 'vitest';
import { gemmCheck } from './gemmCheck.js';

describe('gemm-check on an interpreted sm_90 device', () => {
  it('runs, times and checks every path at a small size', async () => {
    const fake = new FakeLibCuda();
    new PtxInterpreter(fake).attach();
    const driver = new CudaDriver(fake);
    const lines: string[] = [];
    const ok = await gemmCheck(
      driver,
      {
        sizes: [136],
        paths: ['wgmma', 'mma', 'tf32', 'f32'],
        dtypes: ['bf16'],
        iters: 1,
        samples: 32,
        transB: false,
      },
      (line) => lines.push(line),
    );
    expect(lines.slice(2).map((l) => l.split(/\s+/).slice(0, 3))).toEqual([
      ['wgmma', 'bf16', '136'],
      ['mma', 'bf16', '136'],
      ['tf32', 'tf32', '136'],
      ['f32', 'f32', '136'],
    ]);
    expect(
      lines.slice(2).every((l) => l.endsWith(' ok')),
      lines.join('\n'),
    ).toBe(true);
    expect(ok).toBe(true);
    driver.dispose();
  }, 120_000);
});
