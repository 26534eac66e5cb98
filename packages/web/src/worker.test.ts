import { readFile, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { MessageChannel, type MessagePort } from 'node:worker_threads';
import { type Backend, createBackend, RayoError } from '@rayo/core';
import { ggufVocabulary, readHuggingFaceTokenizer, TextModel } from '@rayo/text';
import { MISTRAL, writeTinyTextModel } from '@rayo/text-testkit';
import { llamaToGguf, parseLlamaConfig, writeGgufFile } from '@rayo/train';
import { type RangeServer, serveRanges, tinyLlamaConfig, tinyLlamaWeights } from '@rayo/train-testkit';
import { memoryDirectory } from '@rayo/web-testkit';
import { backendProvider, createWgpuBackend } from '@rayo/wgpu';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TextModelWorker } from './client.js';
import { ModelCache } from './modelCache.js';
import type { OpfsDirectory } from './opfs.js';
import { PREPARED_DATA, PREPARED_INDEX, PreparedDataError } from './preparedStore.js';
import type { MessageEndpoint, WorkerLoadProgress } from './protocol.js';
import { serveTextModel } from './server.js';

// The page's client and the worker's server over a MessageChannel in Node,
// on the cpu backend, with the model cache on an in-memory stand-in for the
// origin-private file system (the real one is exercised in Chromium by the
// chat page's test).

function endpoint(port: MessagePort): MessageEndpoint {
  port.start();
  return port as unknown as MessageEndpoint;
}

const noAdapter = await backendProvider.probe();
let backend: Backend;
let dir: string;
let served: RangeServer;
const root = memoryDirectory();

beforeAll(async () => {
  backend = await createBackend('cpu');
  dir = await writeTinyTextModel({ seed: 5 });
  await writeTinyGguf(join(dir, 'model.gguf'));
  served = await serveRanges(dir);
});

/**
 * The tiny Llama (d 64, untied head) as a 4-bit GGUF file with Mistral's
 * vocabulary: projections Q4_0 (F16 where rows of 91 do not divide into
 * blocks), embedding and head Q8_0, norms F32.
 */
async function writeTinyGguf(path: string): Promise<void> {
  const config = tinyLlamaConfig({ vocab_size: 32000, max_position_embeddings: 64 });
  const source = await readHuggingFaceTokenizer(MISTRAL.dir);
  const typeOf = (name: string, shape: readonly number[]) =>
    shape.length === 1 ? 'F32' : shape[1]! % 32 !== 0 ? 'F16' : name.includes('proj') ? 'Q4_0' : 'Q8_0';
  const gguf = llamaToGguf(parseLlamaConfig(config), tinyLlamaWeights(config, 7), {
    typeOf,
    metadata: ggufVocabulary(source),
  });
  await writeGgufFile(path, gguf);
}
afterAll(async () => {
  await served.close();
  backend.dispose();
  await rm(dir, { recursive: true, force: true });
});

/** Runs `body` with a client and a server joined by a channel (the server's backend the cpu reference), then parts them. */
async function withClient(
  body: (client: TextModelWorker) => Promise<void>,
  on: { backend: () => Promise<Backend>; cacheRoot: OpfsDirectory } = {
    backend: () => createBackend('cpu'),
    cacheRoot: root,
  },
): Promise<void> {
  const { port1, port2 } = new MessageChannel();
  const stop = serveTextModel(endpoint(port2), {
    createBackend: on.backend,
    openCache: () => ModelCache.open(on.cacheRoot),
  });
  const client = new TextModelWorker(endpoint(port1));
  try {
    await body(client);
  } finally {
    await client.dispose();
    stop();
    port1.close();
    port2.close();
  }
}

async function collect(pieces: AsyncIterable<string>): Promise<string> {
  let text = '';
  for await (const piece of pieces) text += piece;
  return text;
}

describe('TextModelWorker over serveTextModel', () => {
  it('loads from a URL with progress, caches it (no request the second time) and generates as TextModel does', async () => {
    const url = `${served.url}files/`;
    const local = await TextModel.load(backend, dir);
    const prompt = 'The cat';
    const expected = await collect(local.generateText(prompt, { maxNewTokens: 20 }));
    local.dispose();
    expect(expected.length).toBeGreaterThan(0);

    await withClient(async (client) => {
      const progress: WorkerLoadProgress[] = [];
      const first = await client.load(url, { onProgress: (p) => progress.push(p) });
      expect(first.fromCache).toBe(false);
      expect(first.backend).toBe('cpu');
      const downloads = progress.flatMap((p) => (p.stage === 'download' ? [p.bytesReceived] : []));
      for (let i = 1; i < downloads.length; i++) expect(downloads[i]).toBeGreaterThan(downloads[i - 1]!);
      const weights = progress.filter((p) => p.stage === 'weights');
      expect(weights.at(-1)).toMatchObject({ tensorsLoaded: 21, tensorsTotal: 21 });
      expect(progress.at(-1)).toEqual({ stage: 'warmup' });
      const generation = client.generateText(prompt, { maxNewTokens: 20 });
      expect(await collect(generation)).toBe(expected);
      expect((await generation.stats)?.finishReason).toMatch(/eos|length/);

      const before = served.requests.length;
      const second = await client.load(url);
      expect(second.fromCache).toBe(true);
      expect(served.requests.length).toBe(before);
      expect(await collect(client.generateText(prompt, { maxNewTokens: 20 }))).toBe(expected);

      const cache = await ModelCache.open(root);
      const listed = await cache.list();
      expect(listed.map((m) => m.url)).toEqual([url]);
      expect(listed[0]!.files.map((f) => f.url)).toContain(`${url}model.safetensors`);
      expect(listed[0]!.absent).toContain(`${url}generation_config.json`);
      expect(await cache.evict(url)).toBe(true);
      expect(await cache.list()).toEqual([]);
      expect(await cache.evict(url)).toBe(false);
      const third = await client.load(url, { warmup: false });
      expect(third.fromCache).toBe(false);
    });
  });

  it('copies a file into the cache by chunks of ranges, and reads it back whole', async () => {
    const cache = await ModelCache.open(memoryDirectory());
    await expect(cache.opener(`${served.url}files/`, { chunkBytes: 0 })).rejects.toThrow(
      /chunkBytes must be a positive integer/,
    );
    const openFile = await cache.opener(`${served.url}files/`, { chunkBytes: 1000 });
    const before = served.requests.length;
    const file = await openFile(`${served.url}files/model.safetensors`);
    const copied = served.requests.slice(before);
    // The size, then one range per chunk, none larger.
    expect(copied).toHaveLength(1 + Math.ceil(file.size / 1000));
    for (const r of copied.slice(1)) expect(r.bytes).toBeLessThanOrEqual(1000);
    const bytes = new Uint8Array(file.size).fill(0xee);
    await file.read(bytes, 0);
    expect(bytes).toEqual(new Uint8Array(await readFile(join(dir, 'model.safetensors'))));
    await expect(file.read(new Uint8Array(2), file.size - 1)).rejects.toThrow(/outside the file/);
  });

  it('aborts a generation mid-way, then generates again', async () => {
    await withClient(async (client) => {
      await client.load(`${served.url}files/`, { cache: false, warmup: false, maxSequence: 256 });
      // A long limit and no stop token: the abort, after the first piece, comes before the end.
      const generation = client.generateText('ab', { maxNewTokens: 200, stopTokenIds: [] });
      let pieces = 0;
      for await (const _ of generation) {
        if (++pieces === 1) generation.abort();
      }
      const stats = await generation.stats;
      expect(stats?.finishReason).toBe('aborted');
      expect(stats!.generatedTokens).toBeLessThan(200);
      const again = await collect(client.generateText('ab', { maxNewTokens: 5 }));
      expect(again.length).toBeGreaterThan(0);
    });
  });

  it('sends a load failure back as a RayoError naming the URL', async () => {
    await withClient(async (client) => {
      const url = `${served.url}nowhere/`;
      const error = await client.load(url, { cache: false }).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(RayoError);
      expect((error as RayoError).argument).toBe(`${url}tokenizer.json`);
      const noModel = await collect(client.generateText('hi')).catch((e: unknown) => e);
      expect((noModel as RayoError).operation).toBe('generateText');
      expect((noModel as Error).message).toMatch(/no model is loaded/);
    });
  });

  (noAdapter && process.env.CI !== 'true' ? it.skip : it)(
    `compiles ahead, on the next load, the shaders the last one compiled (wgpu${noAdapter ? `: ${noAdapter}` : ''})`,
    async () => {
      const url = `${served.url}files/`;
      const cacheRoot = memoryDirectory();
      const on = { backend: () => createWgpuBackend(), cacheRoot };
      const progress: WorkerLoadProgress[] = [];
      await withClient(async (client) => {
        const first = await client.load(url, { maxSequence: 32 });
        expect(first.precompiled).toBe(0);
      }, on);
      const shaders = await (await ModelCache.open(cacheRoot)).shaders(url);
      expect(shaders?.length).toBeGreaterThan(3);
      await withClient(async (client) => {
        const second = await client.load(url, { maxSequence: 32, onProgress: (p) => progress.push(p) });
        expect(second.fromCache).toBe(true);
        expect(second.precompiled).toBe(shaders!.length);
        expect(await collect(client.generateText('The cat', { maxNewTokens: 4 }))).not.toBe('');
      }, on);
      // Every kernel of the last load's warm-up compiled ahead: no second warm-up.
      expect(progress.some((p) => p.stage === 'warmup')).toBe(false);
      const compiles = progress.filter((p) => p.stage === 'compile');
      expect(compiles.at(-1)).toEqual({
        stage: 'compile',
        compiled: shaders!.length,
        total: shaders!.length,
      });
    },
  );

  // On cpu the kept parts are checked on the host as they are read; on wgpu on the device once uploaded.
  const gpuChecks = { parts: 0 };
  const keptOn: [string, () => Promise<Backend>][] = [
    ['cpu', () => createBackend('cpu')],
    [
      `wgpu${noAdapter ? `: ${noAdapter}` : ''}`,
      async () => {
        const gpu = await createWgpuBackend();
        const checksums = gpu.partChecksums.bind(gpu);
        gpu.partChecksums = (tensors) => {
          gpuChecks.parts += tensors.length;
          return checksums(tensors);
        };
        return gpu;
      },
    ],
  ];
  it.each(keptOn.filter(([name]) => name === 'cpu' || !noAdapter || process.env.CI === 'true'))(
    'keeps a GGUF model’s tensors in their device layout: the next load reads them, a damaged copy is rebuilt (%s)',
    async (backendName, makeBackend) => {
      const url = `${served.url}files/model.gguf`;
      const prompt = 'Once upon a time';
      let expected = '';
      const cacheRoot = memoryDirectory();
      const on = { backend: makeBackend, cacheRoot };
      gpuChecks.parts = 0;
      // The 12 Q4_0 projections of 2 layers, the embedding and the head.
      const quantized = 14;
      const cache = await ModelCache.open(cacheRoot);
      const modelFolder = async () => {
        const folder = await cacheRoot.getDirectoryHandle('rayo-models');
        for await (const name of folder.keys()) return folder.getDirectoryHandle(name);
        throw new Error('no model folder');
      };
      const rewrite = async (name: string, edit: (bytes: Uint8Array) => Uint8Array) => {
        const handle = await (await modelFolder()).getFileHandle(name);
        const bytes = edit(new Uint8Array(await (await handle.getFile()).arrayBuffer()));
        const writable = await handle.createWritable();
        await writable.write({ type: 'write', position: 0, data: bytes });
        await writable.close();
      };
      await withClient(async (client) => {
        const first = await client.load(url, { warmup: false });
        expect(first).toMatchObject({ fromCache: false, prepared: { reused: 0, written: quantized } });
        // The first load repacks the file's blocks as a load without the cache does: the reference.
        expected = await collect(client.generateText(prompt, { maxNewTokens: 12 }));
        expect(expected.length).toBeGreaterThan(0);
        const [listed] = await cache.list();
        expect(listed!.preparedBytes).toBeGreaterThan(0);

        const before = served.requests.length;
        const second = await client.load(url, { warmup: false });
        expect(second).toMatchObject({ fromCache: true, prepared: { reused: quantized, written: 0 } });
        // Every part (a Q4_0 tensor's packed words and scales) checked on the device, where it computes checksums.
        expect(gpuChecks.parts).toBe(backendName === 'cpu' ? 0 : 2 * quantized);
        expect(served.requests.length).toBe(before);
        expect(await collect(client.generateText(prompt, { maxNewTokens: 12 }))).toBe(expected);

        // One flipped byte: refused by name (as read, or once uploaded on the device), never used; the worker
        // makes them anew from the cached file.
        await rewrite(PREPARED_DATA, (bytes) => {
          bytes[bytes.length >> 1]! ^= 0x10;
          return bytes;
        });
        const refused = await (async () => {
          const store = await cache.prepared(url);
          const index = await (await (await modelFolder()).getFileHandle(PREPARED_INDEX)).getFile();
          for (const name of Object.keys(JSON.parse(await index.text()).tensors)) await store.read(name);
        })().catch((e: unknown) => e);
        expect(refused).toBeInstanceOf(PreparedDataError);
        expect((refused as RayoError).argument).toMatch(new RegExp(`^${PREPARED_DATA} \\(.+\\)$`));
        const third = await client.load(url, { warmup: false });
        expect(third).toMatchObject({ fromCache: true, prepared: { written: quantized, rebuilt: true } });
        expect(await collect(client.generateText(prompt, { maxNewTokens: 12 }))).toBe(expected);

        // Cut short: refused by its size.
        await rewrite(PREPARED_DATA, (bytes) => bytes.subarray(0, bytes.length - 4));
        const cut = await (await cache.prepared(url)).read('blk.0.attn_q.weight').catch((e: unknown) => e);
        expect(cut).toBeInstanceOf(PreparedDataError);
        expect((cut as RayoError).expected).toMatch(/bytes/);

        expect(await cache.evict(url)).toBe(true);
        const left: string[] = [];
        for await (const name of (await cacheRoot.getDirectoryHandle('rayo-models')).keys()) left.push(name);
        expect(left).toEqual([]);
      }, on);
    },
  );
});
