import { constants } from 'node:buffer';
import { mkdtemp, open, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { openNodeFile } from './randomAccessFile.js';
import { SafetensorsFile } from './safetensorsFile.js';

// A sparse file (no disk blocks behind the hole): a 4 GiB tensor of zeros,
// then a small tensor past the 4 GiB mark.
async function writeLargeFile(path: string): Promise<{ size: number; small: Float32Array }> {
  const bigElements = 2 ** 30 + 4;
  const small = Float32Array.of(1.5, -2.25, 3);
  const bigBytes = bigElements * 4;
  const header = {
    big: { dtype: 'F32', shape: [bigElements], data_offsets: [0, bigBytes] },
    small: { dtype: 'F32', shape: [3], data_offsets: [bigBytes, bigBytes + 12] },
  };
  const json = new TextEncoder().encode(JSON.stringify(header).padEnd(160, ' '));
  const length = new Uint8Array(8);
  new DataView(length.buffer).setBigUint64(0, BigInt(json.length), true);
  const size = 8 + json.length + bigBytes + 12;
  const handle = await open(path, 'w');
  try {
    await handle.write(length, 0, 8, 0);
    await handle.write(json, 0, json.length, 8);
    await handle.write(new Uint8Array(small.buffer), 0, 12, size - 12);
  } finally {
    await handle.close();
  }
  return { size, small };
}

describe('a safetensors file larger than a Node buffer', () => {
  it('opens by its header and reads a tensor that lies past 4 GiB', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'large-safetensors-'));
    try {
      const path = join(dir, 'large.safetensors');
      const { size, small } = await writeLargeFile(path);
      expect((await stat(path)).size).toBe(size);
      expect(size).toBeGreaterThan(constants.MAX_LENGTH);
      const file = await SafetensorsFile.open(await openNodeFile(path));
      try {
        expect(file.entries.get('big')!.shape).toEqual([2 ** 30 + 4]);
        expect(await file.readF32('small')).toEqual(small);
      } finally {
        await file.file.close();
      }
    } finally {
      await rm(dir, { recursive: true });
    }
  });
});
