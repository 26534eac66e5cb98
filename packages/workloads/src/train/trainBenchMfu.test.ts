import { describe, expect, it } from 'vitest';
import { gpt2Report, gpt2Settings, gpt2Throughput, gpt2Timed } from './gpt2ReportFixture.js';
import { gpt2Workloads } from './trainBench.js';
import { mfuMarkdown, mfuRows, mfuSummary } from './trainBenchMfu.js';
import type { TrainBenchReport } from './trainBenchReport.js';
import { trainingFlopsPerStep, workloadId } from './workload.js';

const spec = gpt2Workloads(8)[0]!;
const id = workloadId(spec);

function report(peakTflops?: number): TrainBenchReport {
  return gpt2Report({
    settings: gpt2Settings(peakTflops === undefined ? {} : { peakTflops }),
    workloads: [{ id, ...spec }],
    throughput: [
      gpt2Throughput(id, 'replayed', 200, 2 ** 30),
      { backend: 'cuda', workload: id, mode: 'eager', status: 'error', reason: 'out of memory' },
    ],
    torchResults: [
      {
        id,
        status: 'ok',
        ...gpt2Timed(100, 2 ** 29),
        graph: gpt2Timed(80, 2 ** 29),
        compiled: { error: 'no triton' },
      },
    ],
  });
}

describe('model FLOPs utilisation', () => {
  it("counts GPT-2 small's step as 6 per weight per token plus attention's products", () => {
    expect(id).toBe('transformer-v50257-d768-h12-l12-t1024-b8-bf16');
    const weights = 12 * (4 * 768 * 768 + 3 * 768 * 2048) + 768 * 50257;
    const tokens = 8 * 1024;
    expect(trainingFlopsPerStep(spec)).toBe(6 * weights * tokens + 12 * 12 * 768 * 1024 * tokens);
    expect(trainingFlopsPerStep({ kind: 'mlp', sizes: [4, 3, 2], activation: 'relu', batch: 5 })).toBe(
      6 * (12 + 6) * 5,
    );
  });

  it('gives every timed run its model TFLOP/s, and MFU over the peak given', () => {
    const flops = trainingFlopsPerStep(spec);
    const rows = mfuRows(report(989));
    expect(rows.map((r) => r.run)).toEqual(['rayo cuda replayed', 'torch eager', 'torch graph']);
    expect(rows[0]!.tflops).toBeCloseTo(flops / 0.2 / 1e12, 9);
    expect(rows[2]!.mfu).toBeCloseTo(flops / 0.08 / 1e12 / 989, 9);
    expect(rows[0]!.peakAllocatedBytes).toBe(2 ** 30);
    expect(mfuMarkdown(report(989))).toContain('over the peak given on the command line, 989 TFLOP/s');
    expect(mfuSummary(report(989))).toMatch(/torch graph .*%/);
    // Without a peak: the achieved TFLOP/s, no MFU.
    expect(mfuRows(report()).every((r) => r.mfu === undefined)).toBe(true);
    expect(mfuMarkdown(report())).toContain('No peak was given');
  });
});
