import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { RayoError } from '@rayo/core';
import {
  checkpointFolderReader,
  ggufLlamaReader,
  ggufReader,
  hostileCorpus,
  link,
  put,
  safetensorsReader,
  TINY_CONFIG,
  temporaryDirectory,
  tinyLlamaGguf,
  validFolder,
  validGguf,
  validSafetensors,
} from '@rayo/train-testkit';
import { describe, expect, it } from 'vitest';
import { openNodeFile } from '../checkpoint/randomAccessFile.js';

/** Memory one refusal may add (resident and JS heap): far above a careful reader's, far below a runaway's. */
const MEMORY_BOUND = 100 * 2 ** 20;
/** A refusal takes well under a second; the bound guards against hangs on a loaded machine. */
const TIME_BOUND_MS = 10 * 1000 * Number(process.env.RAYO_TIMEOUT_SCALE ?? 1);

const root = await temporaryDirectory('rayo-hostile-');

describe('the readers accept the valid files the corpus spoils', () => {
  it('a safetensors file, a GGUF file, a tiny decoder GGUF', async () => {
    const dir = join(root, 'valid');
    await safetensorsReader.read(await put(dir, 'model.safetensors', validSafetensors()));
    await ggufReader.read(await put(dir, 'model.gguf', validGguf()));
    await ggufLlamaReader.read(await put(dir, 'tiny.gguf', tinyLlamaGguf()));
  });

  it('a checkpoint folder, and one linked as the Hugging Face cache links it', async () => {
    await checkpointFolderReader.read(await validFolder(join(root, 'valid-folder')));
    const repo = join(root, 'hub', 'models--tiny');
    await put(join(repo, 'blobs'), 'c0nf1g', JSON.stringify(TINY_CONFIG));
    await put(join(repo, 'blobs'), 'we1ght5', validSafetensors());
    const snapshot = join(repo, 'snapshots', 'rev');
    await link(snapshot, 'config.json', '../../blobs/c0nf1g');
    await link(snapshot, 'model.safetensors', '../../blobs/we1ght5');
    await checkpointFolderReader.read(snapshot);
  });

  it('a regular file through openNodeFile; a NUL byte or a missing file refused', async () => {
    const path = await put(join(root, 'plain'), 'x.bin', Uint8Array.of(1, 2, 3));
    const file = await openNodeFile(path);
    expect(file.size).toBe(3);
    await file.close();
    await expect(openNodeFile(`${path}\0`)).rejects.toThrow(RayoError);
    // Node's code stays readable, for callers that treat a missing file as absent.
    const missing = await openNodeFile(`${path}.absent`).catch((e: unknown) => e);
    expect(missing).toBeInstanceOf(RayoError);
    expect((missing as { code?: string }).code).toBe('ENOENT');
  });
});

describe('hostile files', () => {
  const corpus = hostileCorpus();

  it('holds at least 100 cases, each named once', () => {
    expect(corpus.length).toBeGreaterThanOrEqual(100);
    const names = corpus.map((c) => `${c.kind} / ${c.name}`);
    expect(new Set(names).size).toBe(names.length);
  });

  for (const [i, c] of corpus.entries()) {
    it(`${c.kind}: ${c.name} is refused with a RayoError`, async () => {
      const dir = join(root, 'cases', String(i));
      await mkdir(dir, { recursive: true });
      const path = await c.write(dir);
      const before = process.memoryUsage();
      const start = performance.now();
      const outcome = await c.reader.read(path).then(
        () => undefined,
        (error: unknown) => error,
      );
      const elapsed = performance.now() - start;
      const after = process.memoryUsage();
      expect(outcome, `${c.reader.name} accepted it`).toBeInstanceOf(RayoError);
      const message = (outcome as Error).message;
      if (c.reader.namesFile) expect(message).toContain(path);
      if (c.mentions) expect(message).toMatch(c.mentions);
      expect(after.rss - before.rss).toBeLessThan(MEMORY_BOUND);
      expect(after.heapUsed - before.heapUsed).toBeLessThan(MEMORY_BOUND);
      expect(elapsed).toBeLessThan(TIME_BOUND_MS);
    });
  }
});
