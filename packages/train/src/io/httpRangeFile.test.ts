import { stat } from 'node:fs/promises';
import { join } from 'node:path';
import { type Backend, createBackend, RayoError } from '@rayo/core';
import {
  type RangeServer,
  removeTinyLlamas,
  serveRanges,
  tinyLlamaConfig,
  tinyLlamaWeights,
  writeTinyLlama,
} from '@rayo/train-testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { LoadProgress } from '../models/llama/loadProgress.js';
import { LlamaModel } from '../models/llama/model.js';
import { FileSystemError } from './fileError.js';
import { urlFileOpener } from './httpRangeFile.js';

// A tiny sharded checkpoint served by a local HTTP server with byte ranges,
// loaded through the URL opener: what reached the device must be what the
// folder holds, every request a bounded range, and every failure a RayoError
// naming the URL.
const MAX_READ = 4096;
let backend: Backend;
let dir: string;
let served: RangeServer;

beforeAll(async () => {
  backend = await createBackend('cpu');
  const config = tinyLlamaConfig({ max_position_embeddings: 64 });
  dir = await writeTinyLlama(config, tinyLlamaWeights(config, 11), { shards: 2 });
  served = await serveRanges(dir, {
    pages: { '/whole.bin': { type: 'application/octet-stream', body: 'no ranges here' } },
  });
});
afterAll(async () => {
  await served.close();
  backend.dispose();
  await removeTinyLlamas();
});

async function logitsOf(model: LlamaModel, tokens: readonly number[]): Promise<Float32Array> {
  const logits = model.prefill(tokens);
  try {
    return (await logits.read()) as Float32Array;
  } finally {
    logits.dispose();
  }
}

describe('urlFileOpener', () => {
  it('loads a sharded checkpoint over HTTP by bounded ranges, with monotone progress, as from its folder', async () => {
    const bytesSeen: number[] = [];
    const progress: LoadProgress[] = [];
    const openFile = urlFileOpener({ onBytes: (n) => bytesSeen.push(n) });
    const before = served.requests.length;
    const remote = await LlamaModel.load(backend, `${served.url}files`, {
      openFile,
      maxReadBytes: MAX_READ,
      onProgress: (p) => progress.push(p),
      maxSequence: 16,
    });
    const local = await LlamaModel.load(backend, dir, { maxSequence: 16 });
    try {
      const prompt = [5, 17, 3, 42, 8, 1];
      const remoteLogits = await logitsOf(remote, prompt);
      expect(remoteLogits.some((v) => v !== 0)).toBe(true);
      expect(remoteLogits).toEqual(await logitsOf(local, prompt));
    } finally {
      remote.dispose();
      local.dispose();
    }
    const requests = served.requests.slice(before);
    // The index, both shards and config.json were read; every request asked for a range, none for more than a read.
    const shardSize = (await stat(join(dir, 'model-00001-of-00002.safetensors'))).size;
    expect(shardSize).toBeGreaterThan(4 * MAX_READ);
    expect(new Set(requests.map((r) => r.path))).toEqual(
      new Set([
        '/files/config.json',
        '/files/model.safetensors.index.json',
        '/files/model-00001-of-00002.safetensors',
        '/files/model-00002-of-00002.safetensors',
      ]),
    );
    for (const r of requests) {
      expect(r.range, r.path).toMatch(/^bytes=\d+-\d+$/);
      expect(r.status, r.path).toBe(206);
      expect(r.bytes, r.path).toBeLessThanOrEqual(MAX_READ);
    }
    // Received bytes only grow; tensors and bytes uploaded only grow and end complete.
    expect(bytesSeen.length).toBeGreaterThan(10);
    for (let i = 1; i < bytesSeen.length; i++) expect(bytesSeen[i]).toBeGreaterThan(bytesSeen[i - 1]!);
    for (let i = 1; i < progress.length; i++) {
      expect(progress[i]!.tensorsLoaded).toBe(progress[i - 1]!.tensorsLoaded + 1);
      expect(progress[i]!.bytesLoaded).toBeGreaterThan(progress[i - 1]!.bytesLoaded);
    }
    expect(progress.at(-1)!.bytesLoaded).toBe(progress.at(-1)!.bytesTotal);
  });

  it('reads a missing file as a FileSystemError ENOENT naming the URL', async () => {
    const url = `${served.url}files/missing.safetensors`;
    const error = await urlFileOpener()(url).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(FileSystemError);
    expect((error as FileSystemError).code).toBe('ENOENT');
    expect((error as FileSystemError).argument).toBe(url);
    expect((error as Error).message).toContain('HTTP 404');
  });

  it('refuses a short response, a server without ranges, and reads outside the file, naming the URL', async () => {
    const shortServer = await serveRanges(dir, { shortPaths: ['/files/config.json'] });
    const short = `${shortServer.url}files/config.json`;
    const file = await urlFileOpener()(short);
    const into = new Uint8Array(file.size).fill(0xee);
    const shortError = await file.read(into, 0).catch((e: unknown) => e);
    expect(shortError).toBeInstanceOf(RayoError);
    expect((shortError as RayoError).argument).toBe(short);
    expect((shortError as Error).message).toMatch(/ended early/);
    const outside = await file.read(new Uint8Array(2), file.size - 1).catch((e: unknown) => e);
    expect((outside as RayoError).argument).toBe(short);
    expect((outside as Error).message).toMatch(/outside the file/);
    await shortServer.close();

    const whole = `${served.url}whole.bin`;
    const wholeError = await urlFileOpener()(whole).catch((e: unknown) => e);
    expect(wholeError).toBeInstanceOf(RayoError);
    expect((wholeError as RayoError).argument).toBe(whole);
    expect((wholeError as Error).message).toMatch(/does not serve byte ranges/);

    const notUrl = await urlFileOpener()('/etc/hostname').catch((e: unknown) => e);
    expect((notUrl as Error).message).toMatch(/not an http\(s\) URL/);
  });

  it('stops at an abort with the signal’s reason', async () => {
    const controller = new AbortController();
    const openFile = urlFileOpener({ signal: controller.signal });
    const file = await openFile(`${served.url}files/model-00001-of-00002.safetensors`);
    controller.abort(new Error('stopped by the test'));
    await expect(file.read(new Uint8Array(64), 0)).rejects.toThrow('stopped by the test');
  });
});
