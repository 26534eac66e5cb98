import { describe, expect, it } from 'vitest';
import { gpt2Report, gpt2Settings, gpt2Throughput, gpt2Timed } from './gpt2ReportFixture.js';
import { gpt2Workloads, withCheckpointing } from './trainBench.js';
import { checkpointMarkdown, checkpointRows, checkpointSummary } from './trainBenchCheckpoint.js';
import type { TrainBenchReport } from './trainBenchReport.js';
import { type TransformerWorkloadSpec, workloadId } from './workload.js';

const [plain, blocks] = withCheckpointing(gpt2Workloads(8), ['none', 'blocks']) as [
  TransformerWorkloadSpec,
  TransformerWorkloadSpec,
];
const [plainId, blocksId] = [workloadId(plain), workloadId(blocks)];
const GiB = 2 ** 30;

function report(): TrainBenchReport {
  return gpt2Report({
    settings: gpt2Settings({ checkpoint: ['none', 'blocks'] }),
    workloads: [
      { id: plainId, ...plain },
      { id: blocksId, ...blocks },
    ],
    throughput: [
      gpt2Throughput(plainId, 'replayed', 200, 8 * GiB),
      { backend: 'cuda', workload: plainId, mode: 'eager', status: 'error', reason: 'out of memory' },
      gpt2Throughput(blocksId, 'replayed', 250, 2 * GiB),
      gpt2Throughput(blocksId, 'eager', 260, 2 * GiB),
    ],
    torchResults: [
      { id: plainId, status: 'ok', ...gpt2Timed(100, 6 * GiB), graph: gpt2Timed(80, 6 * GiB) },
      { id: blocksId, status: 'ok', ...gpt2Timed(130, 3 * GiB), graph: { error: 'capture failed' } },
    ],
  });
}

describe('the activation checkpointing trade in the report', () => {
  it('names a checkpointed workload apart, and runs each language model once per policy', () => {
    expect(plainId).toBe('transformer-v50257-d768-h12-l12-t1024-b8-bf16');
    expect(blocksId).toBe(`${plainId}-ckpt-blocks`);
    expect(workloadId({ ...plain, checkpoint: { every: 3 } })).toBe(`${plainId}-ckpt-every3`);
    // 'none' leaves a spec as the suite has it.
    expect(plain).toEqual(gpt2Workloads(8)[0]);
    expect(plain).not.toHaveProperty('checkpoint');
    const mlp = { kind: 'mlp', sizes: [4, 2], activation: 'relu', batch: 2 } as const;
    expect(withCheckpointing([mlp, plain], ['none', { every: 2 }]).map(workloadId)).toEqual([
      'mlp-4x2-b2',
      plainId,
      `${plainId}-ckpt-every2`,
    ]);
  });

  it('puts each checkpointed run beside its twin run the same way, rayo’s and PyTorch’s', () => {
    const rows = checkpointRows(report());
    // rayo eager has no twin (the plain eager run failed); torch graph has none with checkpointing.
    expect(rows.map((r) => r.run)).toEqual(['rayo cuda replayed', 'torch eager']);
    expect(rows[0]).toMatchObject({
      workload: plainId,
      policy: 'blocks',
      peakAllocatedBytes: 8 * GiB,
      checkpointedPeakAllocatedBytes: 2 * GiB,
    });
    expect(rows[0]!.checkpointedTokensPerSecond! / rows[0]!.tokensPerSecond!).toBeCloseTo(0.8, 12);
    const md = checkpointMarkdown(report());
    expect(md).toContain('## Activation checkpointing');
    // tokens/s 40,960 → 32,768: speed 0.8; 8 GiB → 2 GiB: peak 0.25.
    expect(md).toContain(
      `| ${plainId} | blocks | rayo cuda replayed | 40960 | 32768 | 0.8 | 8192 | 2048 | 0.25 |`,
    );
    expect(checkpointSummary(report())).toMatch(/torch eager +81920 +63015/);
    // Without a checkpointed workload there is no section.
    const none = { ...report(), workloads: [{ id: plainId, ...plain }] };
    expect(checkpointMarkdown(none)).toBe('');
    expect(checkpointSummary(none)).toBe('');
  });
});
