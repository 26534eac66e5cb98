import { KERNELS } from '@rayo/core';
import { fuzzBadCalls } from '@rayo/core/testing';
import { describe, expect, it } from 'vitest';
import { WgpuBackend } from './backend.js';
import { backendProvider } from './index.js';

const unavailable = await backendProvider.probe();
const needsAdapter = unavailable && process.env.CI !== 'true' ? describe.skip : describe;

needsAdapter('random bad calls on wgpu', () => {
  it('every kernel refuses 2,000 seeded bad calls with RayoErrors only', async () => {
    const backend = await WgpuBackend.create();
    try {
      const summary = await fuzzBadCalls(backend, { calls: 2000, seed: 0x5eed });
      expect(summary.failures).toEqual([]);
      expect(summary.kernels).toBe(KERNELS.length);
      expect(summary.refused).toBeGreaterThan(1500);
      await backend.sync();
      expect(backend.memory().liveTensors).toBe(0);
    } finally {
      backend.dispose();
    }
  });
});
