// The demo page: the WebGPU device, a quick benchmark checked against the
// reference and timed on it, and a small language model trained on it and
// sampled. `?quick` makes every part small enough for a software adapter.
import { type CaseResult, QUICK_TIMING, runBenchmarks, SUITE } from '@rayo/bench';
import { createWgpuBackend, type WgpuBackend } from '@rayo/wgpu';
import { firstNames } from '../../../packages/workloads/src/examples/names/corpus.js';
import {
  NAMES_DEFAULTS,
  sampleNames,
  trainNames,
} from '../../../packages/workloads/src/examples/names/train.js';
import { type Bar, barChart } from './chart.js';

const quick = new URLSearchParams(location.search).has('quick');

// Cases of the benchmark suite of `@rayo/bench`: a square GEMM, a GEMV (one
// row: decoding's product) and a softmax, smaller with ?quick.
const CASE_IDS = quick
  ? ['gemm/128x128x128', 'gemm-llm/16x256x688', 'gemv/1x256x256', 'softmax/64x4096']
  : ['gemm/256x256x256', 'gemm-llm/64x256x256', 'gemv/1x1024x1024', 'softmax/64x4096', 'rmsnorm/64x4096'];

// A character-level transformer on English first names (the names example of
// rayo's workloads), trained long enough in full mode to make names up.
const NAMES = quick
  ? {
      ...NAMES_DEFAULTS,
      dim: 32,
      heads: 2,
      blocks: 1,
      hidden: 64,
      context: 16,
      batch: 16,
      steps: 12,
      evalEvery: 12,
    }
  : {
      ...NAMES_DEFAULTS,
      dim: 64,
      heads: 4,
      blocks: 2,
      hidden: 160,
      context: 24,
      batch: 32,
      steps: 300,
      evalEvery: 100,
    };
const SAMPLES = quick ? 4 : 12;

const $ = (id: string) => document.getElementById(id)!;

function show(id: string, text: string, state: 'status' | 'done' | 'error' = 'done'): void {
  const el = $(id);
  el.textContent = text;
  el.className = state === 'done' ? '' : state;
}

function formatMs(ms: number): string {
  return ms >= 1 ? `${ms.toFixed(2)} ms` : `${(ms * 1000).toFixed(1)} µs`;
}

function benchmarkRow(r: CaseResult): HTMLTableRowElement {
  const row = document.createElement('tr');
  const ms = r.timing?.median;
  const rate = (amount: number | undefined) =>
    ms !== undefined && amount ? (amount / (ms * 1e6)).toFixed(2) : '—';
  for (const text of [
    r.id,
    r.status === 'ok' ? 'matches' : r.status,
    ms === undefined ? (r.message ?? '—') : formatMs(ms),
    rate(r.cost?.flops),
    rate(r.cost?.bytes),
  ]) {
    const cell = document.createElement('td');
    cell.textContent = text;
    row.append(cell);
  }
  return row;
}

async function benchmark(backend: WgpuBackend): Promise<void> {
  const cases = SUITE.filter((c) => CASE_IDS.includes(c.id));
  show(
    'bench-status',
    `checking each kernel against the reference, then timing it: 0 of ${cases.length}`,
    'status',
  );
  const body = $('bench-table').querySelector('tbody')!;
  const results = await runBenchmarks({
    backends: [backend],
    cases,
    timing: quick ? { ...QUICK_TIMING, minReps: 3, targetMs: 20 } : QUICK_TIMING,
    onDone: (r) => {
      body.append(benchmarkRow(r));
      $('bench-table').hidden = false;
      show(
        'bench-status',
        `checking each kernel against the reference, then timing it: ${body.rows.length} of ${cases.length}`,
        'status',
      );
    },
  });
  // One chart a unit: compute-bound cases in GFLOP/s, memory-bound ones in GB/s.
  const charts = (['flops', 'bytes'] as const).map((bound) => {
    const unit = bound === 'flops' ? 'GFLOP/s' : 'GB/s';
    const bars: Bar[] = results.flatMap((r) => {
      const ms = r.timing?.median;
      if (ms === undefined || !r.cost || (r.bound === 'flops') !== (bound === 'flops')) return [];
      return [{ label: r.id, value: (bound === 'flops' ? r.cost.flops : r.cost.bytes) / (ms * 1e6) }];
    });
    const what = bound === 'flops' ? 'Compute-bound cases' : 'Memory-bound cases';
    return bars.length ? barChart(`${what}, ${unit} (median of the timed calls)`, unit, bars) : '';
  });
  $('bench-chart').innerHTML = charts.join('');
  const failed = results.filter((r) => r.status !== 'ok');
  show(
    'bench-status',
    failed.length
      ? `${failed.length} of ${results.length} cases did not pass: ${failed.map((r) => `${r.id} ${r.status}`).join(', ')}`
      : `${results.length} cases, each checked against the reference and timed (${results[0]?.timer ?? 'host'} timer)`,
    failed.length ? 'error' : 'done',
  );
}

async function names(backend: WgpuBackend): Promise<void> {
  show(
    'names-status',
    `training a ${NAMES.blocks}-block transformer on English first names for ${NAMES.steps} steps …`,
    'status',
  );
  const run = await trainNames(backend, firstNames(), NAMES, { progress: false });
  try {
    const samples = await sampleNames(run.model, run.vocab, { count: SAMPLES, seed: 1, temperature: 0.8 });
    const list = $('names');
    for (const name of samples) {
      const item = document.createElement('li');
      item.textContent = name === '' ? '(empty)' : name;
      list.append(item);
    }
    const loss = run.curve.validation.at(-1)!.loss;
    show(
      'names-status',
      `${NAMES.steps} steps in ${run.result.seconds.toFixed(1)} s; validation loss ${loss.toFixed(3)} nats per character ` +
        `(a uniform guess over the ${run.vocab.size} characters: ${Math.log(run.vocab.size).toFixed(3)}). ` +
        (quick
          ? 'Quick mode trains too briefly for names: open the page without ?quick for 300 steps. '
          : '') +
        'Sampled with the KV-cache decoder:',
    );
  } finally {
    run.model.dispose();
  }
}

async function main(): Promise<void> {
  if (!('gpu' in navigator)) {
    show('device', 'This browser has no WebGPU (navigator.gpu).', 'error');
    return;
  }
  const backend = await createWgpuBackend();
  try {
    const { features, limits } = backend.info;
    show(
      'device',
      `${backend.info.device} — features: ${features.join(', ') || 'none'}; ` +
        `largest buffer ${(limits.maxBufferBytes / 2 ** 20).toFixed(0)} MiB`,
    );
    await benchmark(backend);
    await names(backend);
  } finally {
    backend.dispose();
  }
}

main().catch((error: unknown) => {
  const text = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
  const el = $('error') ?? document.body.appendChild(document.createElement('p'));
  el.id = 'error';
  el.className = 'error';
  el.textContent = text;
});
