import { mkdir, mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { RayoError } from '@rayo/core';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { writeCheckpointFile } from '../checkpoint/checkpoint.js';
import { encodeGguf, writeGgufFile } from '../gguf/writer.js';
import { writeFileAtomically } from './atomicWrite.js';

/** Set to make every write to a partial file fail as a full disk does. */
const disk = vi.hoisted(() => ({ full: false }));

vi.mock('node:fs/promises', async (original) => {
  const fs = await original<typeof import('node:fs/promises')>();
  const open: typeof fs.open = async (...args) => {
    const handle = await fs.open(...args);
    if (!disk.full || !String(args[0]).endsWith('.partial')) return handle;
    const write = handle.write.bind(handle);
    return Object.assign(handle, {
      write: async (...a: Parameters<typeof write>) => {
        await write(...a); // part of the bytes land, as on a disk that fills mid-write
        throw Object.assign(new Error('ENOSPC: no space left on device, write'), { code: 'ENOSPC' });
      },
    });
  };
  return { ...fs, open, default: { ...fs, open } };
});

const gguf = {
  metadata: [['general.name', { type: 'string', value: 'tiny' }]] as const,
  tensors: [{ name: 'w', type: 'F32' as const, shape: [4], values: Float32Array.of(1, 2, 3, 4) }],
};

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'rayo-atomic-'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe('atomic writes', () => {
  it('writeGgufFile writes the whole file and leaves no partial file', async () => {
    const path = join(dir, 'a.gguf');
    await writeGgufFile(path, gguf);
    expect(new Uint8Array(await readFile(path))).toEqual(encodeGguf(gguf));
    expect(await readdir(dir)).not.toContain('a.gguf.partial');
  });

  it('a save that fails midway leaves the previous file whole and no partial file', async () => {
    const path = join(dir, 'b.gguf');
    await writeGgufFile(path, gguf);
    const bad = {
      ...gguf,
      tensors: [
        ...gguf.tensors,
        { name: 'x', type: 'F32' as const, shape: [3], values: new Float32Array(2) },
      ],
    };
    await expect(writeGgufFile(path, bad)).rejects.toThrow(/tensor values do not fit its shape/);
    expect(new Uint8Array(await readFile(path))).toEqual(encodeGguf(gguf));
    expect(await readdir(dir)).not.toContain('b.gguf.partial');
  });

  it('a full disk is a RayoError naming the file; the previous file stays and the partial one goes', async () => {
    const path = join(dir, 'c.safetensors');
    await writeCheckpointFile(path, Uint8Array.of(1, 2, 3));
    disk.full = true;
    try {
      const error = await writeCheckpointFile(path, Uint8Array.of(4, 5, 6, 7)).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(RayoError);
      expect((error as RayoError).argument).toBe(path);
      expect((error as Error).message).toMatch(/ENOSPC/);
      const ggufError = await writeGgufFile(join(dir, 'c.gguf'), gguf).catch((e: unknown) => e);
      expect((ggufError as Error).message).toContain(join(dir, 'c.gguf'));
    } finally {
      disk.full = false;
    }
    expect([...(await readFile(path))]).toEqual([1, 2, 3]);
    expect((await readdir(dir)).filter((f) => f.endsWith('.partial'))).toEqual([]);
  });

  it('a target that cannot be written is a RayoError naming it', async () => {
    const path = join(dir, 'missing-folder', 'd.gguf');
    const error = await writeGgufFile(path, gguf).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(RayoError);
    expect((error as Error).message).toContain(path);
    expect((error as Error).message).toMatch(/ENOENT/);
  });

  it('writeCheckpointFile creates its folder', async () => {
    const path = join(dir, 'nested', 'deeper', 'e.safetensors');
    await writeCheckpointFile(path, Uint8Array.of(9));
    expect([...(await readFile(path))]).toEqual([9]);
  });

  it('overwrites an existing file through the rename', async () => {
    const path = join(dir, 'f.bin');
    await mkdir(dir, { recursive: true });
    await writeFile(path, 'old');
    await writeFileAtomically(path, [Uint8Array.of(0x6e), Uint8Array.of(0x65, 0x77)], 'test');
    expect(await readFile(path, 'utf8')).toBe('new');
  });
});
