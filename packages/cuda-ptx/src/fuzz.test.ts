import { KERNELS } from '@rayo/core';
import { fuzzBadCalls } from '@rayo/core/testing';
import { useEmulatedGpu } from '@rayo/cuda-testkit';
import { describe, expect, it } from 'vitest';

describe('random bad calls on cuda, on an emulated device', () => {
  const { gpu } = useEmulatedGpu({ memoryLimit: 2 ** 30 });

  it('every kernel refuses 2,000 seeded bad calls with RayoErrors only', async () => {
    const summary = await fuzzBadCalls(gpu, { calls: 2000, seed: 0x5eed });
    expect(summary.failures).toEqual([]);
    expect(summary.kernels).toBe(KERNELS.length);
    expect(summary.refused).toBeGreaterThan(1500);
    expect(gpu.memory().liveTensors).toBe(0);
  });
});
