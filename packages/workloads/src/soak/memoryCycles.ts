import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Backend } from '@rayo/core';
import { LlamaModel } from '@rayo/train';
import { DECODE_CONFIGS } from '../decode/decodeBench.js';
import { writeSeededLlama } from '../decode/seededLlama.js';
import { liveHeapBytes } from './heap.js';

/** Device memory and the heap after one load, generate, dispose and emptyCache. */
export interface CycleSample {
  readonly cycle: number;
  readonly reservedBytes: number;
  readonly allocatedBytes: number;
  readonly liveTensors: number;
  /** What the device itself reports held by the backend, where the backend says (wgpu: all its buffers, staging included). */
  readonly deviceBytes: number | undefined;
  readonly heapBytes: number;
}

export interface CyclesResult {
  readonly config: string;
  readonly start: CycleSample;
  readonly samples: readonly CycleSample[];
  /** The largest excess of reserved (or device-reported) bytes over the start, after any cycle. */
  readonly maxGrowthBytes: number;
  readonly tokens: readonly number[];
}

export interface CyclesOptions {
  readonly cycles: number;
  /** A DECODE_CONFIGS name (default the tiny Llama). */
  readonly config?: string;
  readonly newTokens?: number;
}

/** Bytes of device buffers the backend holds as its device sees them, where it reports them. */
function deviceBytes(backend: Backend): number | undefined {
  const usage = (backend as { deviceMemory?: () => { usedBytes: number } }).deviceMemory;
  return typeof usage === 'function' ? usage.call(backend).usedBytes : undefined;
}

function sampleOf(backend: Backend, cycle: number): CycleSample {
  const m = backend.memory();
  return {
    cycle,
    reservedBytes: m.reservedBytes,
    allocatedBytes: m.allocatedBytes,
    liveTensors: m.liveTensors,
    deviceBytes: deviceBytes(backend),
    heapBytes: liveHeapBytes(),
  };
}

/**
 * Loads a small Llama, generates a few tokens greedily, disposes the model
 * and empties the cache, `cycles` times: after each cycle the backend's
 * device memory should be back where it started (the decoding target:
 * within 64 MiB over 100 cycles). Every cycle must pick the same tokens.
 */
export async function memoryCycles(backend: Backend, options: CyclesOptions): Promise<CyclesResult> {
  const config = options.config ?? 'llama-tiny';
  const hf = DECODE_CONFIGS[config];
  if (!hf) throw new Error(`no model config '${config}' (${Object.keys(DECODE_CONFIGS).join(', ')})`);
  const dir = await mkdtemp(join(tmpdir(), 'rayo-cycles-'));
  try {
    await writeSeededLlama(dir, hf, 7);
    const prompt = [1, 5, 9, 2];
    const newTokens = options.newTokens ?? 4;
    await backend.sync();
    backend.emptyCache();
    const start = sampleOf(backend, 0);
    const samples: CycleSample[] = [];
    let first: number[] | undefined;
    for (let cycle = 1; cycle <= options.cycles; cycle++) {
      const model = await LlamaModel.load(backend, dir, { maxSequence: prompt.length + newTokens });
      const tokens: number[] = [];
      try {
        for await (const token of model.generate(prompt, { maxNewTokens: newTokens, temperature: 0 }))
          tokens.push(token);
      } finally {
        model.dispose();
      }
      await backend.sync();
      backend.emptyCache();
      first ??= tokens;
      if (tokens.join() !== first.join())
        throw new Error(`cycle ${cycle} generated ${tokens.join()}, the first ${first.join()}`);
      samples.push(sampleOf(backend, cycle));
    }
    const growth = (s: CycleSample) =>
      Math.max(s.reservedBytes - start.reservedBytes, (s.deviceBytes ?? 0) - (start.deviceBytes ?? 0));
    return {
      config,
      start,
      samples,
      maxGrowthBytes: Math.max(0, ...samples.map(growth)),
      tokens: first ?? [],
    };
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/** A cycles result as lines of text, for the CLI. */
export function describeCycles(result: CyclesResult): string {
  const mib = (b: number | undefined) => (b === undefined ? '-' : `${(b / 2 ** 20).toFixed(2)} MiB`);
  const row = (s: CycleSample) =>
    `  ${String(s.cycle).padStart(5)}  reserved ${mib(s.reservedBytes)}  allocated ${mib(s.allocatedBytes)}  device ${mib(s.deviceBytes)}  live tensors ${s.liveTensors}  heap ${mib(s.heapBytes)}`;
  const shown =
    result.samples.length <= 12
      ? result.samples
      : [...result.samples.slice(0, 5), ...result.samples.slice(-5)];
  return [
    `memory cycles (${result.config}): ${result.samples.length} load/generate/dispose/emptyCache cycles, at most ${mib(result.maxGrowthBytes)} above the start (tokens ${result.tokens.join(' ')})`,
    row(result.start),
    ...shown.map(row),
  ].join('\n');
}
