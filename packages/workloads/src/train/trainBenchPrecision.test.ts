import { describe, expect, it } from 'vitest';
import { gpt2Report, gpt2Settings, gpt2Throughput } from './gpt2ReportFixture.js';
import { gpt2Workloads, withPrecisions } from './trainBench.js';
import { precisionMarkdown, precisionRows, precisionSummary } from './trainBenchPrecision.js';
import { workloadId } from './workload.js';

const [f32, f16] = withPrecisions(gpt2Workloads(8), ['f32', 'f16']);
const [f32Id, f16Id] = [workloadId(f32!), workloadId(f16!)];
const GiB = 2 ** 30;

describe('the precision policies in the report', () => {
  it('sets each f16 run beside its f32 twin of the same backend and mode', () => {
    const report = gpt2Report({
      settings: gpt2Settings({ precisions: ['f32', 'f16'] }),
      workloads: [
        { id: f32Id, ...f32! },
        { id: f16Id, ...f16! },
      ],
      throughput: [
        gpt2Throughput(f32Id, 'replayed', 300, 8 * GiB),
        gpt2Throughput(f16Id, 'replayed', 150, 6 * GiB),
        // No f32 twin in eager mode: no row.
        gpt2Throughput(f16Id, 'eager', 160, 6 * GiB),
      ],
      torchResults: [],
    });
    const rows = precisionRows(report);
    expect(rows).toHaveLength(1);
    expect(rows[0]).toMatchObject({ workload: f32Id, precision: 'f16', run: 'rayo cuda replayed' });
    expect(rows[0]!.samplesPerSecond / rows[0]!.f32SamplesPerSecond).toBeCloseTo(2, 10);
    expect(precisionMarkdown(report)).toContain('## Precision policies');
    expect(precisionMarkdown(report)).toMatch(/\| 2(\.00)? \|$/m);
    expect(precisionSummary(report)).toContain('speed / f32');
  });

  it('adds nothing without a reduced policy', () => {
    const report = gpt2Report({
      settings: gpt2Settings(),
      workloads: [{ id: f32Id, ...f32! }],
      throughput: [gpt2Throughput(f32Id, 'replayed', 300, 8 * GiB)],
      torchResults: [],
    });
    expect(precisionMarkdown(report)).toBe('');
    expect(precisionSummary(report)).toBe('');
  });
});
