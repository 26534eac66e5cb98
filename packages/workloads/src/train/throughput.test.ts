import { createCpuBackend } from '@rayo/core';
import { describe, expect, it } from 'vitest';
import { measureThroughput, quantile, summariseTimes } from './throughput.js';
import { QUICK_WORKLOADS } from './trainBench.js';
import { workloadId } from './workload.js';

describe('step time statistics', () => {
  it('interpolates quantiles of sorted values', () => {
    expect(quantile([1, 2, 3, 4], 0.5)).toBe(2.5);
    expect(quantile([5], 0.9)).toBe(5);
    expect(quantile([], 0.5)).toBeNaN();
    expect(summariseTimes([9, 1, 5, 3, 7])).toEqual({ medianMs: 5, p10Ms: 1.8, p90Ms: 8.2 });
  });
});

describe('measureThroughput', () => {
  for (const spec of QUICK_WORKLOADS.filter((w, i, all) => all.findIndex((x) => x.kind === w.kind) === i)) {
    it(`${spec.kind}: trains, reports per-sample and per-token rates, and frees what it made`, async () => {
      const cpu = createCpuBackend();
      const before = cpu.memory().liveTensors;
      const r = await measureThroughput(cpu, spec, { warmup: 1, steps: 3 });
      expect(r.workload).toBe(workloadId(spec));
      expect(r.stepsTimed).toBe(3);
      expect(r.samplesPerSecond).toBeCloseTo((1000 * spec.batch) / r.medianMs, 6);
      expect(r.p10Ms).toBeLessThanOrEqual(r.medianMs);
      expect(r.p90Ms).toBeGreaterThanOrEqual(r.medianMs);
      if (spec.kind === 'transformer')
        expect(r.tokensPerSecond! / r.samplesPerSecond).toBeCloseTo(spec.seq, 9);
      else expect(r.tokensPerSecond).toBeUndefined();
      expect(Number.isFinite(r.firstLoss)).toBe(true);
      // Four AdamW steps on one fixed batch lower its loss.
      expect(r.lastLoss).toBeLessThan(r.firstLoss);
      expect(cpu.memory().liveTensors).toBe(before);
      cpu.dispose();
    });

    it(`${spec.kind}: replayed steps train as the eager ones do, and free what they made`, async () => {
      const cpu = createCpuBackend();
      const before = cpu.memory().liveTensors;
      const eager = await measureThroughput(cpu, spec, { warmup: 1, steps: 3 });
      const replayed = await measureThroughput(cpu, spec, { warmup: 1, steps: 3, mode: 'replayed' });
      const hostFed = await measureThroughput(cpu, spec, { warmup: 1, steps: 3, mode: 'replayed-host' });
      expect(replayed.stepsTimed).toBe(3);
      // The same first loss (the step before any update) and a falling one.
      expect(Math.abs(replayed.firstLoss - eager.firstLoss)).toBeLessThan(1e-6);
      expect(replayed.lastLoss).toBeLessThan(replayed.firstLoss);
      expect(Math.abs(replayed.lastLoss - eager.lastLoss)).toBeLessThan(1e-5);
      // Fed from the device or from the host, the same data: the same losses.
      expect([hostFed.firstLoss, hostFed.lastLoss]).toEqual([replayed.firstLoss, replayed.lastLoss]);
      expect(cpu.memory().liveTensors).toBe(before);
      cpu.dispose();
    });
  }
});
