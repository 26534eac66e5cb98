import type { TrainPrecision } from '@rayo/train';
import type { ParityReport } from './parity.js';
import type { PeakMemory, THROUGHPUT_ADAMW, ThroughputMeasurement } from './throughput.js';
import type { TorchTrainOutput } from './torchTrainBaseline.js';
import type { WorkloadSpec } from './workload.js';

export type ParityModel = ParityReport['model'];

export type BackendEntry =
  | { readonly name: string; readonly available: true; readonly device: string }
  | { readonly name: string; readonly available: false; readonly reason: string };

export type ParityEntry =
  | {
      readonly model: ParityModel;
      readonly backends: readonly [string, string];
      readonly status: 'passed' | 'failed';
      readonly report: ParityReport;
    }
  | {
      readonly model: ParityModel;
      readonly backends: readonly [string, string];
      /** `skipped`: a backend is unavailable or lacks kernels; `error`: training threw. */
      readonly status: 'skipped' | 'error';
      readonly reason: string;
    };

/**
 * How rayo ran the steps: `eager` records and submits each step anew
 * (`trainStep`) on the batch uploaded once; `replayed` records it once and
 * replays it (`ReplayedStep`), copying the batch uploaded once device to
 * device into the step's inputs each step; `replayed-host` replays it
 * writing the batch from the host each step. (In `rayo-train-bench/1`
 * reports, `replayed` wrote the batch from the host.)
 */
export type ThroughputMode = 'eager' | 'replayed' | 'replayed-host';

/** What each way of running copies per step, for the reports. */
export const MODE_COPIES: Readonly<Record<ThroughputMode, string>> = {
  eager: 'nothing: the kernels read the batch uploaded once',
  replayed: 'each input device to device into the recorded step’s inputs, from the batch uploaded once',
  'replayed-host': 'each input host to device (pageable memory) into the recorded step’s inputs',
};

export type ThroughputEntry =
  | {
      readonly backend: string;
      readonly workload: string;
      /** Absent in reports made before replayed steps: eager. */
      readonly mode?: ThroughputMode;
      readonly status: 'ok';
      readonly result: ThroughputMeasurement;
    }
  | {
      readonly backend: string;
      readonly workload: string;
      readonly mode?: ThroughputMode;
      /** `unsupported`: the backend lacks kernels (listed in `missing` when known before training). */
      readonly status: 'unsupported' | 'unavailable' | 'error';
      readonly reason: string;
      readonly missing?: readonly string[];
    };

export type BaselineEntry =
  | { readonly status: 'ok'; readonly output: TorchTrainOutput }
  | { readonly status: 'unavailable' | 'not requested'; readonly reason: string };

/** A rayo throughput against PyTorch's for one workload: eager, and the step replayed as a CUDA graph. */
export interface Comparison {
  readonly backend: string;
  readonly workload: string;
  /** How rayo ran the steps (absent: eager). */
  readonly mode?: ThroughputMode;
  readonly rayoSamplesPerSecond: number;
  readonly torchSamplesPerSecond: number;
  /** rayo / PyTorch eager samples per second: above 1, rayo is faster. */
  readonly ratio: number;
  /** PyTorch with the whole step replayed as a CUDA graph, where it could be captured. */
  readonly torchGraphSamplesPerSecond?: number;
  /** rayo / PyTorch-with-CUDA-graph samples per second. */
  readonly graphRatio?: number;
  /** rayo's peak allocated bytes / PyTorch eager's `max_memory_allocated`: below 1, rayo needs less. */
  readonly peakAllocatedRatio?: number;
  /** rayo's peak allocated bytes / PyTorch-with-CUDA-graph's `max_memory_allocated`. */
  readonly graphPeakAllocatedRatio?: number;
}

export interface TrainBenchSettings {
  readonly backends: readonly string[];
  readonly parity: readonly [string, string];
  readonly quick: boolean;
  readonly warmup: number;
  readonly steps: number;
  readonly paritySteps: number;
  readonly seed: number;
  readonly clipNorm: number;
  readonly adamw: typeof THROUGHPUT_ADAMW;
  /** Which workloads ran (absent in older reports: throughput). */
  readonly suite?: 'throughput' | 'gpt2';
  readonly gpt2Batch?: number;
  /** The checkpointing policies each language model ran under (`none`, `blocks`, `everyN`; absent: none). */
  readonly checkpoint?: readonly string[];
  /** The precision policies every workload ran under, from `--precision` (absent: each workload's own). */
  readonly precisions?: readonly TrainPrecision[];
  /** The device's dense peak in TFLOP/s for the workloads' precision, from the command line. */
  readonly peakTflops?: number;
  /** Whether PyTorch also ran under torch.compile. */
  readonly torchCompile?: boolean;
}

export interface TrainBenchReport {
  readonly schema: 'rayo-train-bench/2';
  readonly createdAt: string;
  readonly node: string;
  readonly settings: TrainBenchSettings;
  readonly backends: readonly BackendEntry[];
  readonly workloads: readonly (WorkloadSpec & { readonly id: string })[];
  readonly parity: readonly ParityEntry[];
  readonly throughput: readonly ThroughputEntry[];
  readonly baseline: BaselineEntry;
  readonly comparisons: readonly Comparison[];
}

/** rayo / PyTorch throughput; undefined unless both are positive and finite. */
export function throughputRatio(rayo: number | undefined, torch: number | undefined): number | undefined {
  const valid = (x: number | undefined): x is number => typeof x === 'number' && Number.isFinite(x) && x > 0;
  return valid(rayo) && valid(torch) ? rayo / torch : undefined;
}

/** One comparison per rayo measurement that PyTorch also timed. */
export function compareWithBaseline(
  throughput: readonly ThroughputEntry[],
  baseline: BaselineEntry,
): Comparison[] {
  if (baseline.status !== 'ok') return [];
  return throughput.flatMap((entry) => {
    if (entry.status !== 'ok') return [];
    const torchSamplesPerSecond = torchSamples(baseline, entry.workload);
    const ratio = throughputRatio(entry.result.samplesPerSecond, torchSamplesPerSecond);
    if (ratio === undefined) return [];
    const torchGraphSamplesPerSecond = torchGraphSamples(baseline, entry.workload);
    const graphRatio = throughputRatio(entry.result.samplesPerSecond, torchGraphSamplesPerSecond);
    const peak = entry.result.memory?.peakAllocatedBytes;
    const torchPeaks = torchMemory(baseline, entry.workload);
    const peakAllocatedRatio = throughputRatio(peak, torchPeaks.eager?.peakAllocatedBytes);
    const graphPeakAllocatedRatio = throughputRatio(peak, torchPeaks.graph?.peakAllocatedBytes);
    return [
      {
        backend: entry.backend,
        workload: entry.workload,
        ...(entry.mode === undefined ? {} : { mode: entry.mode }),
        rayoSamplesPerSecond: entry.result.samplesPerSecond,
        torchSamplesPerSecond: torchSamplesPerSecond!,
        ratio,
        ...(graphRatio === undefined ? {} : { torchGraphSamplesPerSecond, graphRatio }),
        ...(peakAllocatedRatio === undefined ? {} : { peakAllocatedRatio }),
        ...(graphPeakAllocatedRatio === undefined ? {} : { graphPeakAllocatedRatio }),
      },
    ];
  });
}

/** 1 when a parity comparison failed or threw; a skipped one (a backend lacking kernels) is not a failure. */
export function exitCodeOf(report: Pick<TrainBenchReport, 'parity'>): number {
  return report.parity.some((p) => p.status === 'failed' || p.status === 'error') ? 1 : 0;
}

/** A number in `digits` significant digits (whole numbers when larger), or `—` for none. */
export function formatNumber(x: number | undefined, digits = 3): string {
  if (x === undefined || Number.isNaN(x)) return '—';
  if (!Number.isFinite(x)) return String(x);
  if (Math.abs(x) >= 10 ** digits) return Math.round(x).toString();
  if (x !== 0 && Math.abs(x) < 1e-3) return x.toExponential(digits - 1);
  return String(Number(x.toPrecision(digits)));
}

function parityLabel(p: ParityEntry): string {
  return `${p.model}: ${p.backends[0]} vs ${p.backends[1]}`;
}

function throughputReason(entry: ThroughputEntry): string {
  return entry.status === 'ok' ? '' : `${entry.status}: ${entry.reason}`;
}

/**
 * A report section of its own (markdown): a title, what it compares, its
 * table; empty without rows.
 */
export function reportSection(
  title: string,
  intro: string,
  header: readonly string[],
  rows: readonly (readonly string[])[],
): string {
  if (rows.length === 0) return '';
  return ['', `## ${title}`, '', intro, '', ...markdownTable(header, rows), ''].join('\n');
}

function markdownTable(header: readonly string[], rows: readonly (readonly string[])[]): string[] {
  const cell = (s: string) => s.replace(/\|/g, '\\|').replace(/\n/g, ' ');
  return [
    `| ${header.map(cell).join(' | ')} |`,
    `| ${header.map(() => '---').join(' | ')} |`,
    ...rows.map((r) => `| ${r.map(cell).join(' | ')} |`),
  ];
}

/** Columns padded to their widest cell. */
export function textTable(header: readonly string[], rows: readonly (readonly string[])[]): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
  const line = (cells: readonly string[]) =>
    cells
      .map((c, i) => c.padEnd(widths[i]!))
      .join('  ')
      .trimEnd();
  return [line(header), line(widths.map((w) => '-'.repeat(w))), ...rows.map(line)].join('\n');
}

function torchFor(report: TrainBenchReport, e: ThroughputEntry): Comparison | undefined {
  const mode = e.mode ?? 'eager';
  return report.comparisons.find(
    (c) => c.backend === e.backend && c.workload === e.workload && (c.mode ?? 'eager') === mode,
  );
}

/** The backend, and the mode where the steps were replayed: `cuda`, `cuda replayed`, `cuda replayed host-fed`. */
export function rayoLabel(e: Pick<ThroughputEntry, 'backend' | 'mode'>): string {
  if (e.mode === 'replayed') return `${e.backend} replayed`;
  if (e.mode === 'replayed-host') return `${e.backend} replayed host-fed`;
  return e.backend;
}

/** PyTorch eager's samples per second for a workload. */
function torchSamples(baseline: BaselineEntry, workload: string): number | undefined {
  if (baseline.status !== 'ok') return undefined;
  const r = baseline.output.results.find((x) => x.id === workload);
  return r?.status === 'ok' ? r.samplesPerSecond : undefined;
}

/** PyTorch's samples per second for a workload with the step replayed as a CUDA graph. */
function torchGraphSamples(baseline: BaselineEntry, workload: string): number | undefined {
  if (baseline.status !== 'ok') return undefined;
  const r = baseline.output.results.find((x) => x.id === workload);
  const graph = r?.status === 'ok' ? r.graph : undefined;
  return graph && 'samplesPerSecond' in graph ? graph.samplesPerSecond : undefined;
}

/** PyTorch's peak device memory for a workload, eager and with the step replayed as a CUDA graph (GPU only). */
function torchMemory(
  baseline: BaselineEntry,
  workload: string,
): { readonly eager?: PeakMemory; readonly graph?: PeakMemory } {
  if (baseline.status !== 'ok') return {};
  const r = baseline.output.results.find((x) => x.id === workload);
  if (r?.status !== 'ok') return {};
  const graph = r.graph && 'memory' in r.graph ? r.graph.memory : undefined;
  return { eager: r.memory, graph };
}

/** Bytes in MiB. */
export function formatMiB(bytes: number | undefined): string {
  if (bytes === undefined) return '—';
  return formatNumber(bytes / 2 ** 20, 4);
}

/** The peak-memory rows of one workload: every rayo run, then PyTorch eager and graph. */
function memoryRows(report: TrainBenchReport, workload: string): string[][] {
  const rows: string[][] = [];
  for (const e of report.throughput) {
    if (e.workload !== workload || e.status !== 'ok' || e.result.memory === undefined) continue;
    const m = e.result.memory;
    const c = torchFor(report, e);
    rows.push([
      `rayo ${rayoLabel(e)}`,
      formatMiB(m.peakAllocatedBytes),
      formatMiB(m.peakReservedBytes),
      formatNumber(c?.peakAllocatedRatio),
      formatNumber(c?.graphPeakAllocatedRatio),
    ]);
  }
  const torch = torchMemory(report.baseline, workload);
  for (const [label, m] of [
    ['torch eager', torch.eager],
    ['torch graph', torch.graph],
  ] as const) {
    if (m) rows.push([label, formatMiB(m.peakAllocatedBytes), formatMiB(m.peakReservedBytes), '', '']);
  }
  return rows;
}

/** Why PyTorch's step could not be captured for a workload, if it could not. */
function torchGraphError(baseline: BaselineEntry, workload: string): string | undefined {
  if (baseline.status !== 'ok') return undefined;
  const r = baseline.output.results.find((x) => x.id === workload);
  const graph = r?.status === 'ok' ? r.graph : undefined;
  return graph && 'error' in graph ? graph.error : undefined;
}

export function reportMarkdown(report: TrainBenchReport): string {
  const s = report.settings;
  const out: string[] = [
    '# rayo train-bench',
    '',
    `${report.createdAt}, Node ${report.node}${s.quick ? ', quick (tiny sizes)' : ''}.`,
    '',
    '## Backends',
    '',
    ...markdownTable(
      ['backend', 'status', 'device'],
      report.backends.map((b) =>
        b.available ? [b.name, 'available', b.device] : [b.name, 'unavailable', b.reason],
      ),
    ),
    '',
    '## Parity',
    '',
    `The same model from the same seed on the same data for ${s.paritySteps} AdamW steps (clipping at ` +
      `${s.clipNorm}) on two backends. It passes when every step's losses are within the loss tolerance ` +
      '(absolute) and its global gradient norms (before clipping) within the gradient-norm tolerance ' +
      '(relative to the first backend).',
  ];
  for (const p of report.parity) {
    out.push('', `### ${parityLabel(p)}: ${p.status}`, '');
    if ('reason' in p) {
      out.push(p.reason);
      continue;
    }
    const r = p.report;
    out.push(
      `max |Δloss| ${formatNumber(r.maxLossDiff)} (tolerance ${r.lossTolerance}), max gradient-norm ` +
        `relative difference ${formatNumber(r.maxGradNormRelDiff)} (tolerance ${r.gradNormTolerance}).`,
      '',
      ...markdownTable(
        [
          'step',
          `loss ${r.backends[0]}`,
          `loss ${r.backends[1]}`,
          '|Δloss|',
          `grad norm ${r.backends[0]}`,
          `grad norm ${r.backends[1]}`,
          'relative Δ',
        ],
        r.steps.map((st) => [
          String(st.step),
          st.lossA.toPrecision(7),
          st.lossB.toPrecision(7),
          formatNumber(st.lossDiff, 2),
          st.gradNormA.toPrecision(7),
          st.gradNormB.toPrecision(7),
          formatNumber(st.gradNormRelDiff, 2),
        ]),
      ),
    );
    if (r.failures.length > 0) out.push('', ...r.failures.map((f) => `- ${f}`));
  }
  const a = s.adamw;
  out.push(
    '',
    '## Throughput',
    '',
    `AdamW (lr ${a.lr}, betas ${a.beta1}/${a.beta2}, eps ${a.eps}, weight decay ${a.weightDecay}), ` +
      `clipping at ${s.clipNorm}, fp32 products unless a workload's id names its precision (-bf16: ` +
      "rayo's 'bf16' policy against PyTorch's bf16 autocast; -tf32: TF32 allowed on both sides). " +
      `${s.warmup} warm-up steps, then the median of ${s.steps} steps ` +
      '(fewer on the cpu reference), each timed from its start until its loss is read back. Samples are ' +
      'rows (MLP) or sequences ' +
      '(transformer). Every side trains on one batch uploaded once. PyTorch runs each workload twice: ' +
      'eagerly (the kernels read the uploaded batch; no copy), and with the whole step (forward, ' +
      'backward, clipping and a capturable AdamW) captured once in a CUDA graph and replayed, each ' +
      'replay preceded by a device-to-device copy of each input into the graph’s static inputs. ' +
      'rayo runs each workload eagerly (`trainStep`, each step recorded and submitted anew) and ' +
      'recorded once and replayed (`ReplayedStep`, one CUDA graph on cuda), fed from the device and ' +
      'from the host. Every replay also writes its step number and learning rate (8 bytes) into ' +
      'device tensors. Per step, besides that, each row copies:',
    '',
    ...markdownTable(
      ['row', 'copies per step'],
      [
        ['rayo `backend`', MODE_COPIES.eager],
        ['rayo `backend replayed`', MODE_COPIES.replayed],
        ['rayo `backend replayed host-fed`', MODE_COPIES['replayed-host']],
        ['torch eager', 'nothing: the kernels read the batch uploaded once'],
        ['torch graph', 'each input device to device into the graph’s static inputs (`copy_`)'],
      ],
    ),
    '',
    'Compare `replayed` with torch graph: both copy the same bytes on the device per step and nothing ' +
      'from the host. rayo/torch above 1: rayo is faster.',
    '',
    ...markdownTable(
      [
        'workload',
        'backend',
        'samples/s',
        'tokens/s',
        'median ms',
        'p10–p90 ms',
        'steps',
        'torch eager samples/s',
        'rayo/torch eager',
        'torch graph samples/s',
        'rayo/torch graph',
      ],
      report.throughput.map((e) => {
        if (e.status !== 'ok')
          return [e.workload, rayoLabel(e), throughputReason(e), '', '', '', '', '', '', '', ''];
        const r = e.result;
        return [
          e.workload,
          rayoLabel(e),
          formatNumber(r.samplesPerSecond, 4),
          formatNumber(r.tokensPerSecond, 4),
          formatNumber(r.medianMs),
          `${formatNumber(r.p10Ms)}–${formatNumber(r.p90Ms)}`,
          String(r.stepsTimed),
          formatNumber(torchSamples(report.baseline, e.workload), 4),
          formatNumber(torchFor(report, e)?.ratio),
          formatNumber(torchGraphSamples(report.baseline, e.workload), 4),
          formatNumber(torchFor(report, e)?.graphRatio),
        ];
      }),
    ),
    '',
    '## Peak device memory',
    '',
    'The most device memory each run reached, from building the model through its last step (warm-up ' +
      'included): allocated is what tensors and scratch held (PyTorch’s `max_memory_allocated`), reserved ' +
      'what the caching allocator held from the device, in use or cached (`max_memory_reserved`). Each ' +
      'side empties its cache first and resets its peak counters (PyTorch’s `reset_peak_memory_stats`, ' +
      'rayo’s `resetPeakMemory`), so each figure is the run’s own peak. The ratios are rayo’s peak allocated ' +
      'over PyTorch’s: below 1, rayo needs less. PyTorch on a cpu reports none.',
  );
  for (const w of report.workloads) {
    const rows = memoryRows(report, w.id);
    if (rows.length === 0) continue;
    out.push(
      '',
      `### ${w.id}`,
      '',
      ...markdownTable(
        [
          'run',
          'peak allocated MiB',
          'peak reserved MiB',
          'allocated / torch eager',
          'allocated / torch graph',
        ],
        rows,
      ),
    );
  }
  out.push('', '## PyTorch baseline', '');
  const b = report.baseline;
  if (b.status !== 'ok') out.push(`${b.status}: ${b.reason}`);
  else {
    const o = b.output;
    out.push(
      `PyTorch ${o.torch} (CUDA ${o.cuda ?? 'none'}) on ${o.device}, eager and CUDA graph: ` +
        `${JSON.stringify(o.settings ?? {})}.`,
    );
    const failed = o.results.filter((r) => r.status !== 'ok');
    if (failed.length > 0)
      out.push('', ...failed.map((r) => `- ${r.id}: ${r.status === 'error' ? r.message : ''}`));
    const uncaptured = o.results.flatMap((r) => {
      const error = torchGraphError(b, r.id);
      return error === undefined ? [] : [`- ${r.id}, CUDA graph: ${error}`];
    });
    if (uncaptured.length > 0) out.push('', ...uncaptured);
  }
  return `${out.join('\n')}\n`;
}

/** The short table printed last: parity verdicts and throughput with ratios, then why anything did not run. */
export function summaryTable(report: TrainBenchReport): string {
  const notes: string[] = [];
  const parity = textTable(
    ['parity', 'verdict', 'max |Δloss|', 'max grad-norm rel. Δ'],
    report.parity.map((p) => {
      if ('reason' in p) {
        notes.push(`parity ${parityLabel(p)}: ${p.reason}`);
        return [parityLabel(p), p.status, '', ''];
      }
      const r = p.report;
      return [
        parityLabel(p),
        p.status,
        `${formatNumber(r.maxLossDiff, 2)} (tol ${r.lossTolerance})`,
        `${formatNumber(r.maxGradNormRelDiff, 2)} (tol ${r.gradNormTolerance})`,
      ];
    }),
  );
  const throughput = textTable(
    [
      'workload',
      'backend',
      'samples/s',
      'median ms',
      'torch eager',
      'rayo/eager',
      'torch graph',
      'rayo/graph',
      'peak MiB',
      'mem/eager',
      'mem/graph',
    ],
    report.throughput.map((e) => {
      if (e.status !== 'ok') {
        notes.push(`${e.workload} on ${rayoLabel(e)}: ${throughputReason(e)}`);
        return [e.workload, rayoLabel(e), e.status, '', '', '', '', '', '', '', ''];
      }
      const m = e.result.memory;
      return [
        e.workload,
        rayoLabel(e),
        formatNumber(e.result.samplesPerSecond, 4),
        formatNumber(e.result.medianMs),
        formatNumber(torchSamples(report.baseline, e.workload), 4),
        formatNumber(torchFor(report, e)?.ratio),
        formatNumber(torchGraphSamples(report.baseline, e.workload), 4),
        formatNumber(torchFor(report, e)?.graphRatio),
        formatMiB(m?.peakAllocatedBytes),
        formatNumber(torchFor(report, e)?.peakAllocatedRatio),
        formatNumber(torchFor(report, e)?.graphPeakAllocatedRatio),
      ];
    }),
  );
  const b = report.baseline;
  notes.push(
    b.status === 'ok'
      ? `torch ${b.output.torch} on ${b.output.device}`
      : `torch baseline ${b.status}: ${b.reason}`,
  );
  return `${parity}\n\n${throughput}\n\n${notes.join('\n')}\n`;
}
