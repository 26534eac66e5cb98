import { createCpuBackend } from '@rayo/core';
import { afterAll, describe, expect, it } from 'vitest';
import { describeRequestSoak, requestSoak, requestSoakFailures } from './requestSoak.js';

// 40 requests here; the GPU host runs 10,000 with `soak --modes requests`.
describe('requests through the batched engine, on cpu', () => {
  const backend = createCpuBackend();
  afterAll(() => backend.dispose());

  it('every request ends, some cancelled and some preempted; no page, sequence or tensor is left', async () => {
    const result = await requestSoak(backend, { requests: 40, concurrency: 8, maxPrompt: 16, maxNew: 40 });
    console.log(describeRequestSoak(result));
    expect(requestSoakFailures(result)).toEqual([]);
    expect(result.ends.cancelled ?? 0).toBeGreaterThan(3);
    expect(result.ends.length ?? 0).toBeGreaterThan(15);
    expect(result.generatedTokens).toBeGreaterThan(150);
    expect(result.preemptions).toBeGreaterThan(0);
    expect(result.pagesFree).toBe(result.pages);
  }, 300_000);

  it('names what leaked', () => {
    const clean = {
      config: 'x',
      requests: 2,
      concurrency: 1,
      pages: 4,
      ends: { length: 2 },
      generatedTokens: 3,
      preemptions: 0,
      seconds: 1,
      pagesInUse: 0,
      pagesFree: 4,
      sequencesLeft: 0,
      afterWarmup: { allocatedBytes: 8, reservedBytes: 10, liveTensors: 4, heapBytes: 0 },
      halfway: { allocatedBytes: 10, reservedBytes: 10, liveTensors: 5, heapBytes: 0 },
      afterSoak: { allocatedBytes: 10, reservedBytes: 10, liveTensors: 5, heapBytes: 0 },
    };
    expect(requestSoakFailures(clean)).toEqual([]);
    expect(
      requestSoakFailures({
        ...clean,
        ends: { length: 1, failed: 1 },
        pagesInUse: 1,
        pagesFree: 3,
        afterSoak: { ...clean.afterSoak, liveTensors: 6, allocatedBytes: 12 },
      }),
    ).toEqual([
      'requests: 1 failed',
      'requests: 1 pages in use, 3 of 4 free',
      'requests: live tensors 5 halfway → 6',
      'requests: allocated 10 halfway → 12 bytes',
    ]);
  });
});
