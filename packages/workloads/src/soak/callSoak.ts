import { add, type Backend, type CommandBatch, relu, scale, type Tensor } from '@rayo/core';
import { liveHeapBytes } from './heap.js';

/** One sample of a soak: calls made so far, the JavaScript heap and the device memory. */
export interface SoakSample {
  readonly calls: number;
  readonly heapBytes: number;
  readonly allocatedBytes: number;
  readonly reservedBytes: number;
  readonly liveTensors: number;
}

export interface SoakResult {
  readonly mode: 'eager' | 'replayed';
  readonly calls: number;
  /** The first sample is taken after a warm-up of `warmupCalls`; growth is measured from it. */
  readonly samples: readonly SoakSample[];
  readonly heapGrowthBytes: number;
  readonly heapGrowthPerCall: number;
  readonly reservedGrowthBytes: number;
  readonly liveTensorGrowth: number;
}

export interface SoakOptions {
  readonly calls: number;
  /** Samples after the warm-up (default 10). */
  readonly samples?: number;
  /** Calls before the first sample (default: a tenth of `calls`, at most 10,000). */
  readonly warmupCalls?: number;
  /** Eager calls between awaited syncs, as a program awaits its results now and then (default 100). */
  readonly syncEvery?: number;
}

/** Elements of the soak's tensors: small, so that the host side of each call is what is measured. */
const N = 1024;

function sample(backend: Backend, calls: number): SoakSample {
  const m = backend.memory();
  return {
    calls,
    heapBytes: liveHeapBytes(),
    allocatedBytes: m.allocatedBytes,
    reservedBytes: m.reservedBytes,
    liveTensors: m.liveTensors,
  };
}

function summarize(mode: SoakResult['mode'], samples: readonly SoakSample[]): SoakResult {
  const first = samples[0]!;
  const last = samples.at(-1)!;
  const calls = last.calls - first.calls;
  const heapGrowthBytes = last.heapBytes - first.heapBytes;
  return {
    mode,
    calls: last.calls,
    samples,
    heapGrowthBytes,
    heapGrowthPerCall: calls > 0 ? heapGrowthBytes / calls : 0,
    reservedGrowthBytes: last.reservedBytes - first.reservedBytes,
    liveTensorGrowth: last.liveTensors - first.liveTensors,
  };
}

/** Runs `step(i)` for call numbers `from` to `to` - 1, syncing every `syncEvery` calls. */
async function drive(
  backend: Backend,
  from: number,
  to: number,
  syncEvery: number,
  step: (i: number) => void | Promise<void>,
): Promise<void> {
  for (let i = from; i < to; i++) {
    await step(i);
    if ((i + 1) % syncEvery === 0) await backend.sync();
  }
  await backend.sync();
}

async function soak(
  mode: SoakResult['mode'],
  backend: Backend,
  options: SoakOptions,
  step: (i: number) => void | Promise<void>,
  syncEvery: number,
): Promise<SoakResult> {
  const warmup = options.warmupCalls ?? Math.min(10_000, Math.ceil(options.calls / 10));
  const count = Math.max(1, options.samples ?? 10);
  await drive(backend, 0, warmup, syncEvery, step);
  const samples = [sample(backend, warmup)];
  for (let s = 1; s <= count; s++) {
    const from = warmup + Math.floor(((s - 1) * options.calls) / count);
    const to = warmup + Math.floor((s * options.calls) / count);
    await drive(backend, from, to, syncEvery, step);
    samples.push(sample(backend, to));
  }
  return summarize(mode, samples);
}

/**
 * Eager calls, one kernel each: every other one into a given output (no
 * allocation), the others into a fresh output disposed at once (the
 * caching allocator's path), as a program's step does.
 */
export async function eagerSoak(backend: Backend, options: SoakOptions): Promise<SoakResult> {
  const x = backend.upload(
    Float32Array.from({ length: N }, (_, i) => (i % 17) - 8),
    [N],
  );
  const y = backend.empty([N]);
  try {
    return await soak(
      'eager',
      backend,
      options,
      (i) => {
        if (i % 2 === 0) backend.run(add, [x, x], {}, { out: [y] });
        else backend.run(relu, [x])[0]!.dispose();
      },
      options.syncEvery ?? 100,
    );
  } finally {
    x.dispose();
    y.dispose();
  }
}

/** Replays of one recorded batch of a few kernels, each submit awaited: a call is one replay. */
export async function replayedSoak(backend: Backend, options: SoakOptions): Promise<SoakResult> {
  const x = backend.upload(
    Float32Array.from({ length: N }, (_, i) => (i % 13) - 6),
    [N],
  );
  const batch: CommandBatch = backend.batch();
  const made: Tensor[] = [];
  try {
    let t = x;
    for (let k = 0; k < 4; k++) {
      t = batch.run(k % 2 === 0 ? relu : scale, [t], k % 2 === 0 ? {} : { alpha: 0.5 })[0]!;
      made.push(t);
    }
    made.push(batch.run(add, [t, x])[0]!);
    return await soak('replayed', backend, options, () => batch.submit(), options.syncEvery ?? 1000);
  } finally {
    batch.dispose();
    for (const t of made) t.dispose();
    x.dispose();
  }
}

/** A soak result as lines of text, for the CLI. */
export function describeSoak(result: SoakResult): string {
  const mib = (b: number) => `${(b / 2 ** 20).toFixed(2)} MiB`;
  const lines = result.samples.map(
    (s) =>
      `  ${String(s.calls).padStart(9)} calls  heap ${mib(s.heapBytes)}  allocated ${mib(s.allocatedBytes)}  reserved ${mib(s.reservedBytes)}  live tensors ${s.liveTensors}`,
  );
  return [
    `${result.mode}: ${result.calls} calls; heap ${result.heapGrowthBytes >= 0 ? '+' : ''}${mib(result.heapGrowthBytes)} since the warm-up (${result.heapGrowthPerCall.toFixed(3)} bytes per call), reserved ${mib(result.reservedGrowthBytes)}, live tensors ${result.liveTensorGrowth >= 0 ? '+' : ''}${result.liveTensorGrowth}`,
    ...lines,
  ].join('\n');
}
