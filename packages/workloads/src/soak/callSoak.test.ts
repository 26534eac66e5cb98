import { type Backend, createBackend, createCpuBackend, probeBackends } from '@rayo/core';
import { afterAll, describe, expect, it } from 'vitest';
import { describeSoak, eagerSoak, replayedSoak } from './callSoak.js';

/**
 * Short soaks of the leak checks (the GPU host runs 1,000,000 calls with the
 * soak CLI): after a warm-up, the JavaScript heap (collected before each
 * sample) grows by less than HEAP_BOUND over the calls, and the device
 * memory and live tensors do not grow at all. A leak of 0.3 KB per call, as
 * wgpu had, is 6 MB over 20,000 calls.
 */
const CALLS = 20_000;
const HEAP_BOUND = 1.5 * 2 ** 20;

function soakChecks(name: string, open: () => Promise<Backend>, calls: number): void {
  let backend: Backend | undefined;
  afterAll(() => backend?.dispose());

  it(`${name}: ${calls} eager calls leave the heap and device memory flat`, async () => {
    backend ??= await open();
    const result = await eagerSoak(backend, { calls, warmupCalls: 2000, samples: 4 });
    console.log(describeSoak(result));
    expect(result.heapGrowthBytes).toBeLessThan(HEAP_BOUND);
    expect(result.reservedGrowthBytes).toBe(0);
    expect(result.liveTensorGrowth).toBe(0);
  });

  it(`${name}: ${calls / 4} replays of a recorded batch leave the heap and device memory flat`, async () => {
    backend ??= await open();
    const result = await replayedSoak(backend, { calls: calls / 4, warmupCalls: 500, samples: 4 });
    console.log(describeSoak(result));
    expect(result.heapGrowthBytes).toBeLessThan(HEAP_BOUND);
    expect(result.reservedGrowthBytes).toBe(0);
    expect(result.liveTensorGrowth).toBe(0);
  });
}

describe('leak soak on cpu', () => {
  soakChecks('cpu', async () => createCpuBackend(), CALLS);
});

// Under CI the wgpu backend must be there (Mesa lavapipe): a missing adapter fails the test.
const wgpu = (await probeBackends(['wgpu']))[0]!;
const runWgpu = wgpu.available || process.env.CI === 'true';

describe.skipIf(!runWgpu)('leak soak on wgpu', () => {
  soakChecks('wgpu', () => createBackend('wgpu'), CALLS);
});
