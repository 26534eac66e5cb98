import { describe, expect, it } from 'vitest';
import { CpuBackend } from '../cpu/backend.js';
import { KERNELS } from '../kernels/index.js';
import { fuzzBadCalls } from './fuzz.js';

describe('random bad calls on cpu', () => {
  it('every kernel refuses 2,000 seeded bad calls with RayoErrors only', async () => {
    const backend = new CpuBackend();
    const summary = await fuzzBadCalls(backend, { calls: 2000, seed: 0x5eed });
    expect(summary.failures).toEqual([]);
    expect(summary.kernels).toBe(KERNELS.length);
    expect(summary.refused + summary.ran).toBe(2000);
    // Most mutations must be refused, or the fuzzer tests little.
    expect(summary.refused).toBeGreaterThan(1500);
    expect(backend.memory().liveTensors).toBe(0);
  });
});
