import { mkdir, mkdtemp, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { basename, dirname, join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { createBackendFromEnvironment } from '../backendFromEnvironment.js';
import { serveFolder } from './loopbackServer.js';
import type { NodeBlobReads } from './nodeOpfs.js';
import { WEB_BENCH_QUANTS, WEB_BENCH_SHAPES, type WebBenchQuant, webBenchModel } from './webBenchModel.js';
import {
  type DirectRun,
  runDirect,
  runWorker,
  type WorkerLoadTiming,
  type WorkerRun,
} from './webBenchPaths.js';

// web-bench: the browser path of @rayo/web measured in Node, on the
// adapter a desktop browser would use (Dawn through the `webgpu` package),
// against the same model loaded with TextModel.load in the same process:
// loads from a loopback URL and from the model cache, the time to the first
// token and ms/token, and the targets' ratios.

/** The targets: the browser path within 1.3× of Node's, the cached load at 1 GB/s or more. */
export const WEB_TARGETS = { maxRatio: 1.3, minCacheGBps: 1 } as const;

export interface WebBenchSettings {
  readonly shape: string;
  readonly quant: WebBenchQuant;
  /** A .gguf file or a Hugging Face folder to measure instead of a written model. */
  readonly model?: string;
  readonly models: string;
  readonly vocabularies?: string;
  readonly backend: string;
  readonly promptTokens: number;
  readonly newTokens: number;
  readonly repeats: number;
  /** Loads from the cache, each a new page's visit: the median one is reported. */
  readonly cachedLoads: number;
  readonly seed: number;
  readonly out?: string;
  /** Where the model cache's temporary folder is made (default: the system's). */
  readonly cacheDir?: string;
  /** How the cache's files are read back (see `NodeBlobReads`). */
  readonly blob: NodeBlobReads;
}

export const WEB_BENCH_USAGE = `Usage: web-bench [options]

Runs @rayo/web's browser path in Node (TextModelWorker and serveTextModel over a
MessageChannel, the model read by range requests from a loopback HTTP server into
the model cache, kept in a temporary folder standing in for the origin-private file
system) and the same model loaded with TextModel.load from its file, on one backend:
first load (download into the cache), load from the cache, time to the first token
and ms/token of greedy decoding; prints the ratios against the targets (<= ${WEB_TARGETS.maxRatio}x,
>= ${WEB_TARGETS.minCacheGBps} GB/s from the cache). Exits 1 where the two paths' texts differ.

  --shape NAME       ${Object.keys(WEB_BENCH_SHAPES).join(', ')} (default llama-3.2-1b)
  --quant Q          ${WEB_BENCH_QUANTS.join(', ')}: the GGUF file's mix (default q4_0)
  --model PATH       a .gguf file or a Hugging Face model folder to use instead
  --models DIR       where the GGUF file is written once and reused (default web-bench-models)
  --vocabularies DIR a folder with llama3/ and mistral/ tokenizer files
                     (default: tokenizers/ beside this program, else the packages')
  --backend NAME     rayo backend (default wgpu)
  --prompt N         prompt tokens, at most (default 128)
  --new N            tokens to generate (default 128)
  --repeats N        timed generations after the first, medians reported (default 3)
  --cached-loads N   loads from the cache, each a new page's visit on a new device; the
                     median one is reported and judged (default 3)
  --seed N           weights (default 0)
  --cache-dir DIR    where the model cache's temporary folder goes (default the system's)
  --blob R           how the cache's files are read back, as a browser reads OPFS Files:
                     fs (positioned reads of each slice; the default) or openAsBlob
                     (Node's file-backed Blob, which reads at a fraction of that)
  --out DIR          writes report.json there`;

function positive(name: string, text: string, min = 1): number {
  const value = Number(text);
  if (!Number.isInteger(value) || value < min)
    throw new Error(`--${name} takes an integer >= ${min}, got ${text}`);
  return value;
}

export function parseWebBenchArgs(argv: readonly string[]): WebBenchSettings {
  const { values } = parseArgs({
    args: [...argv],
    options: {
      shape: { type: 'string', default: 'llama-3.2-1b' },
      quant: { type: 'string', default: 'q4_0' },
      model: { type: 'string' },
      models: { type: 'string', default: 'web-bench-models' },
      vocabularies: { type: 'string' },
      backend: { type: 'string', default: 'wgpu' },
      prompt: { type: 'string', default: '128' },
      new: { type: 'string', default: '128' },
      repeats: { type: 'string', default: '3' },
      'cached-loads': { type: 'string', default: '3' },
      seed: { type: 'string', default: '0' },
      'cache-dir': { type: 'string' },
      blob: { type: 'string', default: 'fs' },
      out: { type: 'string' },
    },
    strict: true,
  });
  if (!(values.shape in WEB_BENCH_SHAPES)) {
    throw new Error(`--shape takes ${Object.keys(WEB_BENCH_SHAPES).join(', ')}, got ${values.shape}`);
  }
  if (values.blob !== 'fs' && values.blob !== 'openAsBlob') {
    throw new Error(`--blob takes fs or openAsBlob, got ${values.blob}`);
  }
  if (!(WEB_BENCH_QUANTS as readonly string[]).includes(values.quant)) {
    throw new Error(`--quant takes ${WEB_BENCH_QUANTS.join(', ')}, got ${values.quant}`);
  }
  return {
    shape: values.shape,
    quant: values.quant as WebBenchQuant,
    ...(values.model !== undefined ? { model: values.model } : {}),
    models: values.models,
    ...(values.vocabularies !== undefined ? { vocabularies: values.vocabularies } : {}),
    backend: values.backend,
    promptTokens: positive('prompt', values.prompt),
    newTokens: positive('new', values.new, 2),
    repeats: positive('repeats', values.repeats, 0),
    cachedLoads: positive('cached-loads', values['cached-loads']),
    seed: positive('seed', values.seed, 0),
    ...(values['cache-dir'] !== undefined ? { cacheDir: values['cache-dir'] } : {}),
    blob: values.blob,
    ...(values.out !== undefined ? { out: values.out } : {}),
  };
}

export interface WebBenchReport {
  readonly settings: WebBenchSettings;
  readonly model: { readonly path: string; readonly bytes: number; readonly writeSeconds?: number };
  readonly backend: string;
  readonly device: string;
  readonly web: WorkerRun;
  readonly direct: DirectRun;
  /** Whether every generation of both paths gave the same text. */
  readonly sameText: boolean;
  readonly targets: {
    readonly ttftRatio: number;
    readonly msPerTokenRatio: number;
    /** Model bytes over the whole load from the cache (weights on the device and the warmup). */
    readonly cachedLoadGBps: number;
    /** Model bytes over the time to the last tensor on the device, from the cache. */
    readonly cachedWeightsGBps?: number;
    readonly downloadGBps?: number;
    readonly ttftMet: boolean;
    readonly msPerTokenMet: boolean;
    readonly cachedLoadMet: boolean;
  };
}

/** A model file's size; 0 for a folder (its bytes are the cache's count after the first load). */
async function modelBytes(path: string): Promise<number> {
  const info = await stat(path);
  return info.isFile() ? info.size : 0;
}

/** Runs both paths on one model and returns the report (written to `out`/report.json where given). */
export async function webBench(
  settings: WebBenchSettings,
  log: (line: string) => void = () => {},
): Promise<WebBenchReport> {
  const model = settings.model
    ? { path: resolve(settings.model), bytes: await modelBytes(resolve(settings.model)) }
    : await webBenchModel({ ...settings, dir: settings.models }, log);
  const generation = { newTokens: settings.newTokens, repeats: settings.repeats };

  log(`TextModel.load from ${model.path} on ${settings.backend}`);
  const backend = await createBackendFromEnvironment(settings.backend);
  let direct: DirectRun;
  try {
    direct = await runDirect(backend, model.path, settings.promptTokens, generation);
  } finally {
    backend.dispose();
  }

  // A .gguf file is served from its folder by name; a Hugging Face folder as the folder itself.
  const isFile = (await stat(model.path)).isFile();
  const server = await serveFolder(isFile ? dirname(model.path) : model.path);
  const url = isFile ? `${server.url}${encodeURIComponent(basename(model.path))}` : server.url;
  const cacheDir = await mkdtemp(join(settings.cacheDir ?? tmpdir(), 'web-bench-cache-'));
  let web: WorkerRun;
  try {
    log(`TextModelWorker.load from ${url} (model cache in ${cacheDir})`);
    web = await runWorker(
      () => createBackendFromEnvironment(settings.backend),
      url,
      cacheDir,
      { ...generation, prompt: direct.prompt },
      settings.blob,
      settings.cachedLoads,
    );
  } finally {
    await server.close();
    await rm(cacheDir, { recursive: true, force: true });
  }

  const bytes = web.cachedBytes || model.bytes;
  const gbps = (seconds: number | undefined) => (seconds ? bytes / 1e9 / seconds : undefined);
  const texts = [
    web.generation.first,
    ...web.generation.runs,
    direct.generation.first,
    ...direct.generation.runs,
  ];
  const ttftRatio = web.generation.ttftMs / direct.generation.ttftMs;
  const msPerTokenRatio = web.generation.msPerToken / direct.generation.msPerToken;
  const cachedLoadGBps = gbps(web.cachedLoad.seconds) ?? 0;
  const cachedWeightsGBps = gbps(web.cachedLoad.weightsSeconds);
  const downloadGBps = gbps(web.firstLoad.downloadSeconds);
  const report: WebBenchReport = {
    settings,
    model: { ...model, bytes },
    backend: settings.backend,
    device: direct.device,
    web,
    direct,
    sameText: texts.every((t) => t.text === texts[0]!.text),
    targets: {
      ttftRatio,
      msPerTokenRatio,
      cachedLoadGBps,
      ...(cachedWeightsGBps !== undefined ? { cachedWeightsGBps } : {}),
      ...(downloadGBps !== undefined ? { downloadGBps } : {}),
      ttftMet: ttftRatio <= WEB_TARGETS.maxRatio,
      msPerTokenMet: msPerTokenRatio <= WEB_TARGETS.maxRatio,
      cachedLoadMet: cachedLoadGBps >= WEB_TARGETS.minCacheGBps,
    },
  };
  if (settings.out) {
    await mkdir(settings.out, { recursive: true });
    await writeFile(join(settings.out, 'report.json'), `${JSON.stringify(report, null, 2)}\n`);
  }
  return report;
}

/** Which of the loads from the cache is reported: the median of several, in the order they ran. */
function cachedLoadsNote(loads: readonly number[]): string {
  if (loads.length === 1) return 'one load';
  return `the median of ${loads.length}: ${loads.map((t) => t.toFixed(2)).join(', ')} s`;
}

const s = (seconds: number | undefined) => (seconds === undefined ? '-' : `${seconds.toFixed(2)} s`);
const ms = (value: number) => `${value.toFixed(2)} ms`;
const rate = (value: number | undefined) => (value === undefined ? '-' : `${value.toFixed(2)} GB/s`);
const met = (ok: boolean) => (ok ? 'met' : 'NOT met');

/**
 * Where a load's time went, in s, from the stages the worker reported: the
 * download (first load), the header (until the first tensor; the tokenizer
 * is begun there and built in steps while the weights load), the weights
 * (read, repacked or read prepared, uploaded), the model's assembly (where
 * the tokenizer's last steps, if any, and the shaders compiled ahead are
 * waited for), the warmup.
 */
export function loadPhases(load: WorkerLoadTiming): [string, number | undefined][] {
  const download = load.downloadSeconds ?? 0;
  const warmupAt = load.warmupSeconds === undefined ? undefined : load.seconds - load.warmupSeconds;
  const between = (from: number | undefined, to: number | undefined) =>
    from === undefined || to === undefined ? undefined : to - from;
  return [
    ['download into the cache', load.downloadSeconds],
    ['header, tokenizer begun', between(download, load.openSeconds)],
    [
      'weights: read, repack or prepared, upload; tokenizer alongside',
      between(load.openSeconds, load.weightsSeconds),
    ],
    ['model assembly, tokenizer and shaders finished', between(load.weightsSeconds, warmupAt)],
    ['warmup', load.warmupSeconds],
    ['whole load', load.seconds],
  ];
}

/** The two loads' phases as a table, with the prepared tensors of each. */
function phaseTable(web: WorkerRun): string[] {
  const first = loadPhases(web.firstLoad);
  const cached = loadPhases(web.cachedLoad);
  const prepared = ({ prepared: p }: WorkerLoadTiming) =>
    `${p.reused} read, ${p.written} written${p.rebuilt ? ', rebuilt' : ''}`;
  return [
    '| phase | first load | from the cache |',
    '| --- | --- | --- |',
    ...first.map(([name, seconds], i) => `| ${name} | ${s(seconds)} | ${s(cached[i]![1])} |`),
    `| prepared tensors | ${prepared(web.firstLoad)} | ${prepared(web.cachedLoad)} |`,
  ];
}

/** The report as lines of text. */
export function webBenchSummary(report: WebBenchReport): string {
  const { web, direct, targets } = report;
  const gen = (name: string, g: DirectRun['generation']) =>
    `${name}: time to first token ${ms(g.ttftMs)}, ${ms(g.msPerToken)}/token (median of ${g.runs.length || 1}; ` +
    `first after load ${ms(g.first.ttftMs)}, ${ms(g.first.msPerToken)}/token; ` +
    `${g.first.promptTokens} prompt tokens, ${g.first.generatedTokens} generated)` +
    (g.posted
      ? `; as the worker side posted them: ${ms(g.posted.ttftMs)}, ${ms(g.posted.msPerToken)}/token`
      : '');
  const lines = [
    `model ${report.model.path}: ${(report.model.bytes / 1e9).toFixed(3)} GB` +
      (report.model.writeSeconds !== undefined
        ? ` (written in ${report.model.writeSeconds.toFixed(1)} s)`
        : ' (reused)'),
    `backend ${report.backend} (${report.device})`,
    `first load from the URL: ${s(web.firstLoad.seconds)}; download into the cache ${s(web.firstLoad.downloadSeconds)} ` +
      `(${rate(targets.downloadGBps)}), weights on the device at ${s(web.firstLoad.weightsSeconds)}, warmup ${s(web.firstLoad.warmupSeconds)}`,
    `load from the cache (Blobs read by ${report.settings.blob}; ${cachedLoadsNote(web.cachedLoads)}): ${s(web.cachedLoad.seconds)} (${rate(targets.cachedLoadGBps)}); weights on the device at ` +
      `${s(web.cachedLoad.weightsSeconds)} (${rate(targets.cachedWeightsGBps)}), warmup ${s(web.cachedLoad.warmupSeconds)}, ` +
      `${web.cachedLoad.precompiled} shaders compiled ahead; no model request: ${web.cachedLoad.fromCache}`,
    ...phaseTable(web),
    `TextModel.load from the file: ${s(direct.loadSeconds)}`,
    gen('browser path', web.generation),
    gen('TextModel', direct.generation),
    `same text on both paths: ${report.sameText}`,
    `targets: time to first token ${targets.ttftRatio.toFixed(2)}x (<= ${WEB_TARGETS.maxRatio}x: ${met(targets.ttftMet)}), ` +
      `ms/token ${targets.msPerTokenRatio.toFixed(2)}x (${met(targets.msPerTokenMet)}), ` +
      `load from the cache ${rate(targets.cachedLoadGBps)} (>= ${WEB_TARGETS.minCacheGBps} GB/s: ${met(targets.cachedLoadMet)})`,
  ];
  return `${lines.join('\n')}\n`;
}
