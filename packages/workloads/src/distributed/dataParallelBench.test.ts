import { describe, expect, it } from 'vitest';
import {
  bucketBytesOf,
  LOSS_TOLERANCE,
  maxRelativeDifference,
  mibList,
  overlapSettings,
  precisionOf,
  tokensPerSecond,
  zeroSettings,
} from './dataParallelBench.js';
import { batchColumns } from './dataParallelWorker.js';

describe('dp-bench', () => {
  it('takes a rank’s sequences out of a sequence-first batch', () => {
    // [seq 2, batch 4]: row t holds token t of each of the 4 sequences.
    const ids = Int32Array.from([0, 1, 2, 3, 10, 11, 12, 13]);
    expect(Array.from(batchColumns(ids, 2, 4, 2, 4))).toEqual([2, 3, 12, 13]);
    expect(Array.from(batchColumns(ids, 2, 4, 0, 2))).toEqual([0, 1, 10, 11]);
  });

  it('compares loss curves by their largest relative difference', () => {
    expect(maxRelativeDifference([2, 1], [2.002, 1])).toBeCloseTo(1e-3, 6);
    expect(maxRelativeDifference([2, 1], [2])).toBe(Number.POSITIVE_INFINITY);
    expect(maxRelativeDifference([4, 3], [4, 3.1])).toBeGreaterThan(LOSS_TOLERANCE.bf16);
    expect(maxRelativeDifference([4, 3], [4, 3.03])).toBeGreaterThan(LOSS_TOLERANCE.f32);
  });

  it('counts tokens per second at the median step', () => {
    expect(tokensPerSecond([10, 1000, 20], 4096)).toBeCloseTo(204_800, 6);
  });

  it('reads --overlap as on, off or both (an A/B of the N-GPU run)', () => {
    expect(overlapSettings('on')).toEqual(['on']);
    expect(overlapSettings('off')).toEqual(['off']);
    expect(overlapSettings('both')).toEqual(['on', 'off']);
    expect(() => overlapSettings('yes')).toThrow(/--overlap.*on \| off \| both/);
  });

  it('reads --bucket-mb as MiB of gradients per bucket', () => {
    expect(bucketBytesOf('25')).toBe(25 * 2 ** 20);
    expect(bucketBytesOf('0.5')).toBe(2 ** 19);
    expect(() => bucketBytesOf('0')).toThrow(/--bucket-mb/);
    expect(() => bucketBytesOf('lots')).toThrow(/a number > 0/);
  });

  it('reads --zero as on, off, both or a list of the two, and --precision as f32 or bf16', () => {
    expect(zeroSettings('off')).toEqual(['off']);
    expect(zeroSettings('both')).toEqual(['on', 'off']);
    expect(zeroSettings('off,on')).toEqual(['off', 'on']);
    expect(() => zeroSettings('1')).toThrow(/--zero.*on \| off \| both/);
    expect(() => zeroSettings('on,off,on')).toThrow(/--zero/);
    expect(precisionOf('bf16')).toBe('bf16');
    expect(() => precisionOf('fp16')).toThrow(/--precision.*f32 \| bf16.*fp16/);
  });

  it('writes per-rank bytes in MiB', () => {
    expect(mibList([2 ** 20, 3.4 * 2 ** 20])).toBe('[1, 3] MiB');
  });
});
