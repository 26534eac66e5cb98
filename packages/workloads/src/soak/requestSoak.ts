import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Backend } from '@rayo/core';
import { BatchedEngine, Scheduler, SequenceCancelled, type SequenceEnd } from '@rayo/server';
import { LlamaModel, type LlamaWeightDType, Rng } from '@rayo/train';
import { DECODE_CONFIGS } from '../decode/decodeBench.js';
import { writeSeededLlama } from '../decode/seededLlama.js';
import { liveHeapBytes } from './heap.js';

/**
 * Many requests through the batched engine and the scheduler, the way a
 * server sees them: random prompt lengths, lengths and sampling, some
 * cancelled while queued, some after a few tokens. Afterwards every page
 * must be back in the pool and the backend must hold what it held halfway
 * (the serving target: no page leaked after 10,000 requests).
 */

export interface RequestSoakOptions {
  readonly requests: number;
  /** A DECODE_CONFIGS name (default the tiny Llama). */
  readonly config?: string;
  readonly dtype?: LlamaWeightDType;
  /** Sequences decoding at once (the engine's batch; default 32). */
  readonly concurrency?: number;
  /** Longest prompt and longest answer (defaults 32 and 64 tokens). */
  readonly maxPrompt?: number;
  readonly maxNew?: number;
  /** Pages of 16 rows in the pool (default: half of what every sequence at full length needs, so that some are preempted). */
  readonly pages?: number;
  readonly seed?: number;
  /** Called after every `progressEvery` (default 1,000) finished requests of the soak proper. */
  readonly onProgress?: (done: number, seconds: number) => void;
  readonly progressEvery?: number;
}

interface MemorySample {
  readonly allocatedBytes: number;
  readonly reservedBytes: number;
  readonly liveTensors: number;
  readonly heapBytes: number;
}

export interface RequestSoakResult {
  readonly config: string;
  readonly requests: number;
  readonly concurrency: number;
  readonly pages: number;
  /** How the requests ended, counted. */
  readonly ends: Readonly<Partial<Record<SequenceEnd, number>>>;
  readonly generatedTokens: number;
  readonly preemptions: number;
  readonly seconds: number;
  /** The pool after the last request: every page free. */
  readonly pagesInUse: number;
  readonly pagesFree: number;
  readonly sequencesLeft: number;
  readonly afterWarmup: MemorySample;
  /** After the first half of the requests, everything idle: the steady state the second half must keep. */
  readonly halfway: MemorySample;
  readonly afterSoak: MemorySample;
}

const PAGE_SIZE = 16;

function sample(backend: Backend): MemorySample {
  const m = backend.memory();
  return {
    allocatedBytes: m.allocatedBytes,
    reservedBytes: m.reservedBytes,
    liveTensors: m.liveTensors,
    heapBytes: liveHeapBytes(),
  };
}

/** Runs `tasks` with at most `width` of them pending at once. */
async function pooled(count: number, width: number, task: (i: number) => Promise<void>): Promise<void> {
  let next = 0;
  const worker = async () => {
    while (next < count) await task(next++);
  };
  await Promise.all(Array.from({ length: Math.min(width, count) }, worker));
}

export async function requestSoak(backend: Backend, options: RequestSoakOptions): Promise<RequestSoakResult> {
  const config = options.config ?? 'llama-tiny';
  const hf = DECODE_CONFIGS[config];
  if (!hf) throw new Error(`no model config '${config}' (${Object.keys(DECODE_CONFIGS).join(', ')})`);
  const concurrency = options.concurrency ?? 32;
  const maxPrompt = options.maxPrompt ?? 32;
  const maxNew = options.maxNew ?? 64;
  const rowsEach = Math.ceil((maxPrompt + maxNew) / PAGE_SIZE);
  const pages = options.pages ?? Math.max(rowsEach, Math.floor(concurrency * rowsEach * 0.5));
  const vocab = hf.vocab_size as number;
  const rng = new Rng(options.seed ?? 3);
  const dir = await mkdtemp(join(tmpdir(), 'rayo-request-soak-'));
  try {
    await writeSeededLlama(dir, hf, 11, options.dtype ?? 'f32');
    const model = await LlamaModel.load(backend, dir, {
      maxSequence: maxPrompt + maxNew,
      ...(options.dtype ? { weightDtype: options.dtype } : {}),
    });
    const paged = model.pagedCache({ pages, pageSize: PAGE_SIZE, maxBatch: concurrency });
    const engine = new BatchedEngine(paged, { prefillTokens: 2 * maxPrompt });
    const scheduler = new Scheduler(engine, {
      maxConcurrent: concurrency,
      maxQueue: 4 * concurrency,
      queueTimeoutMs: 600_000,
    });
    const ends: Partial<Record<SequenceEnd, number>> = {};
    let generatedTokens = 0;
    const one = async () => {
      const request = {
        promptIds: Array.from({ length: 1 + rng.int(maxPrompt) }, () => rng.int(vocab)),
        maxNewTokens: 1 + rng.int(maxNew),
        temperature: rng.uniform(0, 1) < 0.5 ? 0 : 0.8,
        seed: rng.int(1 << 30),
        stopTokenIds: [],
      };
      const draw = rng.uniform(0, 1);
      // Some leave at once (queued, or before their prompt ran), some after a few tokens.
      const leaveAfter = draw < 0.15 ? 0 : draw < 0.35 ? 1 + rng.int(4) : Number.POSITIVE_INFINITY;
      const sequence = scheduler.submit(request);
      if (leaveAfter === 0) sequence.cancel();
      let n = 0;
      try {
        for await (const _ of sequence) {
          generatedTokens++;
          if (++n >= leaveAfter) break;
        }
      } catch (error) {
        if (!(error instanceof SequenceCancelled)) throw error;
      }
      const end = sequence.end ?? 'failed';
      ends[end] = (ends[end] ?? 0) + 1;
    };
    try {
      // The warm-up records every batch size's step and fills the allocator's pools.
      await pooled(4 * concurrency, 2 * concurrency, one);
      await scheduler.idle();
      await backend.sync();
      const afterWarmup = sample(backend);
      for (const key of Object.keys(ends)) delete ends[key as SequenceEnd];
      generatedTokens = 0;
      const preemptionsBefore = engine.usage().pages?.preemptions ?? 0;
      const start = performance.now();
      let done = 0;
      const every = options.progressEvery ?? 1000;
      const run = async (count: number) => {
        await pooled(count, 2 * concurrency, async () => {
          await one();
          if (++done % every === 0) options.onProgress?.(done, (performance.now() - start) / 1000);
        });
        await scheduler.idle();
        await backend.sync();
      };
      // Two halves with an idle point between: a batch size first seen in the
      // first half records its step then (a bounded cache); the second half
      // must hold no more than the first left.
      const first = Math.floor(options.requests / 2);
      await run(first);
      const halfway = sample(backend);
      await run(options.requests - first);
      const seconds = (performance.now() - start) / 1000;
      await backend.sync();
      const usage = engine.usage();
      return {
        config,
        requests: options.requests,
        concurrency,
        pages,
        ends,
        generatedTokens,
        preemptions: (usage.pages?.preemptions ?? 0) - preemptionsBefore,
        seconds,
        pagesInUse: usage.pages?.inUse ?? -1,
        pagesFree: usage.pages?.free ?? -1,
        sequencesLeft: usage.sequences + scheduler.active + scheduler.queued,
        afterWarmup,
        halfway,
        afterSoak: sample(backend),
      };
    } finally {
      await scheduler.close();
      paged.dispose();
      model.dispose();
    }
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/** What went wrong with a soak's result; empty when every check held. */
export function requestSoakFailures(r: RequestSoakResult): string[] {
  const failed: string[] = [];
  const ended = Object.values(r.ends).reduce((a, b) => a + (b ?? 0), 0);
  if (ended !== r.requests) failed.push(`requests: ${ended} of ${r.requests} ended`);
  if ((r.ends.failed ?? 0) > 0) failed.push(`requests: ${r.ends.failed} failed`);
  if (r.pagesInUse !== 0 || r.pagesFree !== r.pages)
    failed.push(`requests: ${r.pagesInUse} pages in use, ${r.pagesFree} of ${r.pages} free`);
  if (r.sequencesLeft !== 0) failed.push(`requests: ${r.sequencesLeft} sequences left`);
  if (r.afterSoak.liveTensors !== r.halfway.liveTensors)
    failed.push(`requests: live tensors ${r.halfway.liveTensors} halfway → ${r.afterSoak.liveTensors}`);
  if (r.afterSoak.allocatedBytes > r.halfway.allocatedBytes)
    failed.push(
      `requests: allocated ${r.halfway.allocatedBytes} halfway → ${r.afterSoak.allocatedBytes} bytes`,
    );
  return failed;
}

export function describeRequestSoak(r: RequestSoakResult): string {
  const mib = (b: number) => (b / 2 ** 20).toFixed(2);
  const ends = Object.entries(r.ends)
    .map(([how, n]) => `${how} ${n}`)
    .join(', ');
  return [
    `requests: ${r.requests} through the batched engine (${r.config}, ${r.concurrency} at once, ${r.pages} pages of ${PAGE_SIZE} rows) in ${r.seconds.toFixed(1)} s`,
    `  ended: ${ends}; ${r.generatedTokens} tokens; ${r.preemptions} preemptions`,
    `  pool after: ${r.pagesInUse} pages in use, ${r.pagesFree} free; ${r.sequencesLeft} sequences left`,
    ...(
      [
        ['after the warm-up', r.afterWarmup],
        ['halfway', r.halfway],
        ['after the soak', r.afterSoak],
      ] as const
    ).map(
      ([when, m]) =>
        `  ${when}: allocated ${mib(m.allocatedBytes)} MiB, reserved ${mib(m.reservedBytes)} MiB, live tensors ${m.liveTensors}, heap ${mib(m.heapBytes)} MiB`,
    ),
  ].join('\n');
}
