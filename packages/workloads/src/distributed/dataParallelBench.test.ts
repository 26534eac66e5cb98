import { chmod, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import {
  bucketBytesOf,
  LOSS_TOLERANCE,
  maxRelativeDifference,
  mibList,
  overlapSettings,
  precisionOf,
  runTorch,
  tokensPerSecond,
  zeroSettings,
} from './dataParallelBench.js';
import { batchColumns } from './dataParallelWorker.js';

describe('dp-bench', () => {
  it('runs the DDP baseline eager or under torch.compile, and reads its result', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'dp-torch-'));
    const previous = process.env.PYTHON;
    try {
      // A stand-in for python: records its arguments and writes what the script would.
      const fake = join(dir, 'python');
      await writeFile(
        fake,
        [
          '#!/bin/sh',
          `echo "$@" > ${join(dir, 'args')}`,
          'while [ "$1" != "--out" ]; do shift; done',
          `echo '{"tokensPerSecond": 1234, "medianMs": 5, "peakBytes": [1048576]}' > "$2"`,
        ].join('\n'),
      );
      await chmod(fake, 0o755);
      process.env.PYTHON = fake;
      const compiled = await runTorch(join(dir, 'request.json'), 2, join(dir, 'out.json'), true);
      expect(compiled).toEqual({ tokensPerSecond: 1234, medianMs: 5, peakBytes: [1048576] });
      expect(await readFile(join(dir, 'args'), 'utf8')).toMatch(/--gpus 2 --out \S+out\.json --compile\n$/);
      await runTorch(join(dir, 'request.json'), 1, join(dir, 'out.json'));
      expect(await readFile(join(dir, 'args'), 'utf8')).not.toContain('--compile');
    } finally {
      if (previous === undefined) delete process.env.PYTHON;
      else process.env.PYTHON = previous;
      await rm(dir, { recursive: true, force: true });
    }
  });

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
