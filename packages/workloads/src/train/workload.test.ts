import { createCpuBackend } from '@rayo/core';
import { trainStep } from '@rayo/train';
import { describe, expect, it } from 'vitest';
import { PARITY_WORKLOADS } from './parity.js';
import { QUICK_WORKLOADS } from './trainBench.js';
import {
  buildWorkload,
  missingKernels,
  optimizerFor,
  samplesPerStep,
  tokensPerStep,
  trainingKernels,
  workloadId,
} from './workload.js';

describe('workloads', () => {
  it('names workloads by their shapes', () => {
    expect(workloadId({ kind: 'mlp', sizes: [784, 256, 10], activation: 'relu', batch: 256 })).toBe(
      'mlp-784x256x10-b256',
    );
    const lm = {
      kind: 'transformer',
      vocab: 512,
      dim: 256,
      heads: 4,
      hidden: 688,
      blocks: 2,
      seq: 128,
      batch: 16,
    } as const;
    expect(workloadId(lm)).toBe('transformer-v512-d256-h4-l2-t128-b16');
    expect(samplesPerStep(lm)).toBe(16);
    expect(tokensPerStep(lm)).toBe(16 * 128);
    expect(tokensPerStep(PARITY_WORKLOADS.mlp)).toBeUndefined();
  });

  it('builds the same parameters and data from the same seed', async () => {
    const read = async (seed: number) => {
      const cpu = createCpuBackend();
      const work = buildWorkload(cpu, PARITY_WORKLOADS.transformer, seed);
      const first = await work.model.parameters()[0]!.value.read();
      work.dispose();
      cpu.dispose();
      return Array.from(first);
    };
    expect(await read(3)).toEqual(await read(3));
    expect(await read(3)).not.toEqual(await read(4));
  });

  for (const spec of [PARITY_WORKLOADS.mlp, PARITY_WORKLOADS.transformer, QUICK_WORKLOADS[2]!]) {
    it(`${workloadId(spec)}: the miniature finds exactly the kernels of the full step`, async () => {
      const cpu = createCpuBackend();
      const work = buildWorkload(cpu, spec, 0);
      const optimizer = optimizerFor(work.model, 'adamw', undefined);
      const used = new Set<string>();
      await trainStep({ backend: cpu, optimizer, loss: (t) => work.loss(t), clipNorm: 1, kernelsUsed: used });
      optimizer.dispose();
      work.dispose();
      cpu.dispose();
      const found = await trainingKernels(spec, { optimizer: 'adamw', clipNorm: 1 });
      expect(found).toEqual([...used].sort());
      expect(found).toContain('multiTensorAdamw');
      expect(found).toContain('globalNorm');
      if (spec.kind === 'transformer')
        expect(found).toEqual(expect.arrayContaining(['rope', 'flashAttention', 'flashAttentionBackward']));
    });
  }

  it('lists the kernels a backend lacks', () => {
    const cpu = createCpuBackend();
    cpu.supports = (name) => name !== 'rope';
    expect(missingKernels(cpu, ['softmax', 'rope', 'matmul'])).toEqual(['rope']);
    cpu.dispose();
  });
});
