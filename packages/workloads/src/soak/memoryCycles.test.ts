import { type Backend, createBackend, createCpuBackend, probeBackends } from '@rayo/core';
import { afterAll, describe, expect, it } from 'vitest';
import { describeCycles, memoryCycles } from './memoryCycles.js';

/** Five cycles here; the GPU host runs 100 with the soak CLI against the 64 MiB target. */
const CYCLES = 5;

function cycleChecks(name: string, open: () => Promise<Backend>): void {
  let backend: Backend | undefined;
  afterAll(() => backend?.dispose());

  it(`${name}: device memory is back where it started after each load, generate, dispose and emptyCache`, async () => {
    backend = await open();
    const result = await memoryCycles(backend, { cycles: CYCLES });
    console.log(describeCycles(result));
    expect(result.samples).toHaveLength(CYCLES);
    for (const s of result.samples) {
      expect(s.liveTensors, `cycle ${s.cycle}`).toBe(result.start.liveTensors);
      expect(s.allocatedBytes, `cycle ${s.cycle}`).toBe(result.start.allocatedBytes);
    }
    expect(result.maxGrowthBytes).toBeLessThanOrEqual(64 * 2 ** 20);
  });
}

describe('memory cycles on cpu', () => {
  cycleChecks('cpu', async () => createCpuBackend());
});

// Under CI the wgpu backend must be there (Mesa lavapipe): a missing adapter fails the test.
const wgpu = (await probeBackends(['wgpu']))[0]!;
const runWgpu = wgpu.available || process.env.CI === 'true';

describe.skipIf(!runWgpu)('memory cycles on wgpu', () => {
  cycleChecks('wgpu', () => createBackend('wgpu'));
});
