import { existsSync } from 'node:fs';
import { mkdtemp, readdir, readFile, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { nodeOpfsDirectory } from './nodeOpfs.js';
import { parseWebBenchArgs, webBench, webBenchSummary } from './webBench.js';
import { webBenchModel } from './webBenchModel.js';

// web-bench end to end with the tiny model on the cpu backend: both paths
// run, give the same text, and the browser path's cache behaves (a download
// the first time, no request the second). No timing is asserted.

const dir = await mkdtemp(join(tmpdir(), 'web-bench-test-'));
afterAll(() => rm(dir, { recursive: true, force: true }));

describe('web-bench', () => {
  it('runs the browser path and TextModel.load on the tiny model, with the same text', async () => {
    const settings = parseWebBenchArgs([
      ...['--shape', 'llama-tiny', '--backend', 'cpu', '--prompt', '20', '--new', '6', '--repeats', '1'],
      ...['--cached-loads', '2'],
      ...['--models', join(dir, 'models'), '--cache-dir', dir, '--out', join(dir, 'out')],
    ]);
    const report = await webBench(settings);
    const file = await stat(report.model.path);
    expect(report.model.writeSeconds).toBeGreaterThan(0);
    expect(report.model.bytes).toBe(file.size);
    expect(report.sameText).toBe(true);
    const { first, runs } = report.web.generation;
    expect(first.text.length).toBeGreaterThan(0);
    expect(runs).toHaveLength(1);
    expect(first.promptTokens).toBeGreaterThan(10);
    expect(first.promptTokens).toBeLessThanOrEqual(20);
    expect(first.promptTokens).toBe(report.direct.generation.first.promptTokens);
    expect(report.web.firstLoad).toMatchObject({ fromCache: false, bytesDownloaded: file.size });
    expect(report.web.cachedLoad).toMatchObject({ fromCache: true, bytesDownloaded: 0 });
    // Two loads from the cache, the faster reported (the lower middle of two).
    expect(report.web.cachedLoads).toHaveLength(2);
    expect(report.web.cachedLoad.seconds).toBe(Math.min(...report.web.cachedLoads));
    expect(webBenchSummary(report)).toMatch(
      /load from the cache \(Blobs read by fs; the median of 2: [\d.]+, [\d.]+ s\)/,
    );
    expect(report.web.cachedLoad.weightBytes).toBeGreaterThan(0);
    expect(report.web.cachedLoad.weightsSeconds).toBeLessThanOrEqual(report.web.cachedLoad.seconds);
    // The cached load uploads the tensors the first one prepared, and the summary shows where the time went.
    const { written } = report.web.firstLoad.prepared;
    expect(written).toBeGreaterThan(0);
    expect(report.web.cachedLoad.prepared).toEqual({ reused: written, written: 0, rebuilt: false });
    expect(webBenchSummary(report)).toMatch(/\| header, tokenizer begun \| [\d.]+ s \| [\d.]+ s \|/);
    expect(webBenchSummary(report)).toMatch(
      new RegExp(`\\| prepared tensors \\| 0 read, ${written} written \\| ${written} read, 0 written \\|`),
    );
    expect(JSON.parse(await readFile(join(dir, 'out', 'report.json'), 'utf8')).sameText).toBe(true);
    expect(webBenchSummary(report)).toMatch(/same text on both paths: true/);
    // The model cache's temporary folder is gone; the model file is reused.
    expect((await readdir(dir)).filter((name) => name.startsWith('web-bench-cache-'))).toEqual([]);
    const again = await webBenchModel({
      shape: 'llama-tiny',
      quant: 'q4_0',
      seed: 0,
      dir: join(dir, 'models'),
    });
    expect(again).toEqual({ path: report.model.path, bytes: file.size });
  }, 120_000);

  it('refuses an unknown shape or quantization and a bad count, naming the option', () => {
    expect(() => parseWebBenchArgs(['--shape', 'gpt-9'])).toThrow(/--shape takes .*llama-3.2-1b.*gpt-9/);
    expect(() => parseWebBenchArgs(['--quant', 'q3_k'])).toThrow(/--quant takes q4_0, q4_k_m, got q3_k/);
    expect(() => parseWebBenchArgs(['--new', '1'])).toThrow(/--new takes an integer >= 2, got 1/);
    expect(() => parseWebBenchArgs(['--blob', 'mmap'])).toThrow(/--blob takes fs or openAsBlob, got mmap/);
  });

  it.each(['fs', 'openAsBlob'] as const)(
    'stands in for the origin-private file system on disk (Blobs read by %s)',
    async (reads) => {
      const root = await nodeOpfsDirectory(join(dir, `opfs-${reads}`), reads);
      await expect(root.getFileHandle('a')).rejects.toMatchObject({ name: 'NotFoundError' });
      const file = await root.getFileHandle('a', { create: true });
      const writable = await file.createWritable();
      await writable.write({ type: 'write', position: 3, data: new Uint8Array([7, 8]) });
      expect((await file.getFile()).size).toBe(0);
      await writable.close();
      expect([...new Uint8Array(await (await file.getFile()).arrayBuffer())]).toEqual([0, 0, 0, 7, 8]);
      const kept = await file.createWritable({ keepExistingData: true });
      await kept.write({ type: 'write', position: 0, data: new Uint8Array([9]) });
      await kept.abort();
      expect([...new Uint8Array(await (await file.getFile()).arrayBuffer())]).toEqual([0, 0, 0, 7, 8]);
      const blob = await file.getFile();
      expect([...new Uint8Array(await blob.slice(2, 4).arrayBuffer())]).toEqual([0, 7]);
      expect([...new Uint8Array(await blob.slice(1, 9).slice(2).arrayBuffer())]).toEqual([7, 8]);
      await root.getDirectoryHandle('sub', { create: true });
      const keys: string[] = [];
      for await (const key of root.keys()) keys.push(key);
      expect(keys.sort()).toEqual(['a', 'sub']);
      await expect(root.getDirectoryHandle('a')).rejects.toMatchObject({ name: 'TypeMismatchError' });
      await root.removeEntry('sub');
      await expect(root.removeEntry('sub')).rejects.toMatchObject({ name: 'NotFoundError' });
      expect(existsSync(join(dir, `opfs-${reads}`, 'sub'))).toBe(false);
    },
  );
});
