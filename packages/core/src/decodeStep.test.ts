import { describe, expect, it } from 'vitest';
import { createCpuBackend } from './cpu/backend.js';
import { decodeStep } from './decodeStep.js';

describe('decodeStep', () => {
  // 2 query heads sharing 1 kv head, headDim 2, a cache of 4 rows.
  it('writes the new rows and attends over every row up to them', async () => {
    const backend = createCpuBackend();
    const kCache = backend.zeros([1, 4, 2]);
    const vCache = backend.zeros([1, 4, 2]);
    const q = backend.upload([1, 0, 0, 1], [2, 2]);
    // Row 0 (zeros) is already cached; rows 1 and 2 are new.
    const k = backend.upload([Math.LN2 * Math.SQRT2, 0, 0, 0], [2, 2]);
    const v = backend.upload([3, 6, 9, 12], [2, 2]);
    const out = decodeStep(backend, { q, k, v, kCache, vCache, position: 1 });
    expect(Array.from(await kCache.read())).toEqual([
      0,
      0,
      Math.fround(Math.LN2 * Math.SQRT2),
      0,
      0,
      0,
      0,
      0,
    ]);
    expect(Array.from(await vCache.read())).toEqual([0, 0, 3, 6, 9, 12, 0, 0]);
    // Head 0 scores (0, ln 2, 0) after the 1/sqrt(2) scale: weights (1, 2, 1) / 4. Head 1 scores are all 0.
    const want = [(2 * 3 + 9) / 4, (2 * 6 + 12) / 4, (3 + 9) / 3, (6 + 12) / 3];
    const got = Array.from(await out.read());
    for (const [i, g] of got.entries()) expect(g).toBeCloseTo(want[i]!, 5);
  });

  it('reads the row and the attended length from device tensors: recorded once, replayed at each position', async () => {
    const backend = createCpuBackend();
    const kCache = backend.zeros([1, 3, 2]);
    const vCache = backend.zeros([1, 3, 2]);
    const q = backend.upload([1, 0], [1, 2]);
    const k = backend.upload([0, 0], [1, 2]);
    const v = backend.empty([1, 2]);
    const row = backend.zeros([1], 'i32');
    const length = backend.zeros([1], 'i32');
    const batch = backend.batch();
    const out = decodeStep(batch, { q, k, v, kCache, vCache, position: { row, length } });
    const outputs: number[][] = [];
    for (const position of [0, 1, 2]) {
      backend.write(v, Float32Array.of(position + 1, 10 * (position + 1)));
      backend.write(row, Int32Array.of(position));
      backend.write(length, Int32Array.of(position + 1));
      await batch.submit();
      outputs.push(Array.from(await out.read()));
    }
    expect(Array.from(await vCache.read())).toEqual([1, 10, 2, 20, 3, 30]);
    // Equal scores (the keys are 0): the mean of the values written so far.
    expect(outputs).toEqual([
      [1, 10],
      [1.5, 15],
      [2, 20],
    ]);
  });
});
