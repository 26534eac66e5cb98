import { constants } from 'node:buffer';
import { mkdtemp, open, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { openNodeFile } from '../checkpoint/randomAccessFile.js';
import { GgufFile } from './ggufFile.js';
import { ggufPieces } from './writer.js';

describe('a GGUF file larger than a Node buffer', () => {
  it('opens by its header and reads a Q8_0 tensor that lies past 4 GiB', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'large-gguf-'));
    try {
      const path = join(dir, 'large.gguf');
      // A sparse file: a 4 GiB F32 tensor left as a hole, then one Q8_0 block.
      const block = Uint8Array.of(0x00, 0x38, ...Array.from({ length: 32 }, (_, j) => j));
      const pieces = ggufPieces({
        metadata: [['general.architecture', { type: 'string', value: 'llama' }]],
        tensors: [
          { name: 'big', type: 'F32', shape: [2 ** 30 + 8], bytes: new Uint8Array(0) },
          { name: 'small', type: 'Q8_0', shape: [32], bytes: block },
        ],
      });
      // Only the header is taken: the pieces after it are made as they are asked for.
      const header = pieces.next().value as Uint8Array;
      const smallAt = header.length + (2 ** 30 + 8) * 4;
      const handle = await open(path, 'w');
      try {
        await handle.write(header, 0, header.length, 0);
        await handle.write(block, 0, block.length, smallAt);
      } finally {
        await handle.close();
      }
      const { size } = await stat(path);
      expect(size).toBeGreaterThan(constants.MAX_LENGTH);
      const gguf = await GgufFile.open(await openNodeFile(path));
      try {
        expect(gguf.tensor('big').byteLength).toBe((2 ** 30 + 8) * 4);
        expect(gguf.dataStart + gguf.tensor('small').offset).toBe(smallAt);
        expect(await gguf.readBytes('small')).toEqual(block);
      } finally {
        await gguf.close();
      }
    } finally {
      await rm(dir, { recursive: true });
    }
  });
});
