import type { BackendInfo } from '@rayo/core';
import {
  type AnnotatedResult,
  type BaselineStatus,
  belowLimit,
  ceilingsOf,
  formatFraction,
  formatRate,
  formatSummary,
  type MachineInfo,
  type MemoryLimit,
  NUMERIC_COLUMNS,
  type PeakTflops,
  peakTflopsFor,
  tableColumns,
  tableRows,
} from './report.js';
import { FAMILIES } from './suite.js';
import type { TimingOptions } from './timing.js';

/** A Markdown table cell: pipes escaped, line breaks flattened. */
export function markdownCell(text: string): string {
  return text.replace(/\\/g, '\\\\').replace(/\|/g, '\\|').replace(/\r?\n/g, ' ');
}

/** A Markdown table: a header row, the alignment row, then the rows. */
export function markdownTable(
  header: readonly string[],
  rows: readonly (readonly string[])[],
  rightAligned: ReadonlySet<string> = new Set(),
): string {
  const line = (cells: readonly string[]) => `| ${cells.map(markdownCell).join(' | ')} |`;
  const align = header.map((h) => (rightAligned.has(h) ? '---:' : '---'));
  return [line(header), `| ${align.join(' | ')} |`, ...rows.map(line)].join('\n');
}

export interface MarkdownInput {
  readonly date: Date;
  readonly mode: string;
  readonly filter?: string;
  readonly machine: MachineInfo;
  readonly backends: readonly BackendInfo[];
  readonly unavailable: readonly { readonly name: string; readonly reason?: string }[];
  readonly peakTflops?: PeakTflops;
  readonly baseline: BaselineStatus;
  readonly results: readonly AnnotatedResult[];
  /** The timing rules both sides followed. */
  readonly timing: TimingOptions;
  /** The bandwidth each backend's memory-bound cases are held to. */
  readonly memoryLimits?: ReadonlyMap<string, MemoryLimit>;
  /** Families with a chart, and its path relative to the Markdown file. */
  readonly charts?: ReadonlyMap<string, string>;
}

function baselineLine(baseline: BaselineStatus): string {
  switch (baseline.status) {
    case 'not-run':
      return 'not run (`--baseline torch` runs it)';
    case 'unavailable':
      return `not available: ${baseline.reason}`;
    case 'ok': {
      const what = [
        baseline.torch ? `PyTorch ${baseline.torch}` : 'PyTorch',
        baseline.cuda ? `CUDA ${baseline.cuda}` : undefined,
        baseline.device ? `on ${baseline.device}` : undefined,
      ].filter(Boolean);
      return `${what.join(', ')}; fp32 with TF32 off`;
    }
  }
}

/** The Markdown report: the run, the backends and their ceilings, then a section per case family. */
export function formatMarkdown(input: MarkdownInput): string {
  const out: string[] = [];
  const m = input.machine;
  out.push('# rayo-bench results', '');
  out.push(`- **date**: ${input.date.toISOString()}`);
  out.push(`- **mode**: ${input.mode}${input.filter ? ` (filter \`${input.filter}\`)` : ''}`);
  out.push(
    `- **machine**: ${m.platform} ${m.arch}, ${m.cpus.count} × ${m.cpus.model}, ` +
      `${(m.memoryBytes / 2 ** 30).toFixed(0)} GiB, Node ${m.node}`,
  );
  out.push(`- **PyTorch baseline**: ${baselineLine(input.baseline)}`);
  for (const u of input.unavailable)
    out.push(`- **${u.name}** unavailable: ${u.reason ?? 'no reason given'}`);
  out.push(`- **result**: ${formatSummary(input.results.map((a) => a.result))}`);
  out.push('');

  const ceilings = ceilingsOf(input.results.map((a) => a.result));
  out.push('## Backends', '');
  out.push(
    markdownTable(
      [
        'backend',
        'device',
        'kind',
        'own copy (GB/s)',
        'memory limit (GB/s)',
        'measured by',
        'peak (TFLOP/s)',
      ],
      input.backends.map((b) => {
        const limit = input.memoryLimits?.get(b.name);
        return [
          b.name,
          b.device,
          b.kind,
          formatRate(ceilings.get(b.name)?.gbps),
          formatRate(limit?.gbps),
          limit?.source ?? '-',
          formatRate(peakTflopsFor(input.peakTflops, b.name, b.kind)),
        ];
      }),
      new Set(['own copy (GB/s)', 'memory limit (GB/s)', 'peak (TFLOP/s)']),
    ),
    '',
  );
  out.push('## How it was timed', '', ...timingMethod(input.timing), '');
  out.push(
    '**median**: per call (per kernel for `batch`). **limit**: the time a perfect kernel would take — the ' +
      'bytes it must move at the memory limit (`bw`, memory-bound cases) or its FLOPs at the given peak ' +
      '(`fp`, FLOP-bound cases); **of limit**: limit time / rayo time. **torch via**: how the PyTorch ' +
      'baseline ran (`graph` or `eager`, then the call); **torch of limit**: PyTorch’s fraction of the same ' +
      'limit. **t/torch**: rayo time / PyTorch time (below 1: rayo is faster); **thru/torch**: rayo ' +
      'throughput / PyTorch throughput.',
    '',
  );
  const below = belowLimit(input.results);
  out.push('## Below half of the hardware limit', '');
  if (below.length === 0) out.push('No timed case with a limit is below 50% of it.', '');
  else {
    out.push(
      markdownTable(
        ['backend', 'case', 'of limit', 'torch of limit'],
        below.map(({ result, limit }) => [
          result.backend,
          `\`${result.id}\``,
          formatFraction(limit!.fraction, limit!.of),
          formatFraction(limit!.torchFraction, limit!.of),
        ]),
        new Set(['of limit', 'torch of limit']),
      ),
      '',
    );
  }

  const withTorch = input.results.some((a) => a.torch);
  const header = tableColumns(withTorch);
  const families = [...new Set(input.results.map((a) => a.result.family))].sort(
    (a, b) => familyOrder(a) - familyOrder(b),
  );
  for (const family of families) {
    const info = FAMILIES[family];
    out.push(`## ${family}${info ? `: ${info.title}` : ''}`, '');
    const chart = input.charts?.get(family);
    if (chart) out.push(`![${family}](${chart})`, '');
    const rows = input.results.filter((a) => a.result.family === family);
    out.push(markdownTable(header, tableRows(rows, withTorch), NUMERIC_COLUMNS), '');
  }

  const notes = input.results.map((a) => a.result).filter((r) => r.status !== 'ok' && r.message);
  if (notes.length) {
    out.push('## Not timed', '');
    for (const r of notes)
      out.push(`- **${r.status}** ${r.backend} \`${r.id}\`: ${markdownCell(r.message!)}`);
    out.push('');
  }
  return `${out.join('\n').trimEnd()}\n`;
}

/** The one timing method of rayo and PyTorch, as every report states it. */
export function timingMethod(t: TimingOptions): string[] {
  const seconds = (ms: number) => `${ms / 1000} s`;
  return [
    '- **Device-timed cases** (`timer` = `device`): a sample is N calls submitted together, timed by the ' +
      `device and divided by N; N starts at 1 and grows until a sample lasts ${t.deviceSampleMs} ms, at most ` +
      `${t.maxCallsPerSample}. rayo: wgpu records the N calls into one command buffer between two timestamp ` +
      'queries; cuda captures them into one CUDA graph and times its launch with CUDA events. PyTorch: the ' +
      'same N calls captured into one CUDA graph and replayed between CUDA events (`graph`), and, for ' +
      'comparison, launched back to back from Python between one pair of events (`eager`); the faster is ' +
      'the baseline.',
    '- **Host-timed cases** (`timer` = `host`: uploads, reads, the weight cache, the 1000-kernel batch): ' +
      'wall time around one call and a synchronisation, on both sides (PyTorch also replays a CUDA graph of ' +
      'the call where one can be captured; the faster is the baseline).',
    `- **Both sides** use the same warm-up (${t.warmup} runs, fewer once they took ${seconds(t.targetMs)}), ` +
      `the same repetitions (at least ${t.minReps}, until ${seconds(t.targetMs)} of timing, at most ` +
      `${t.maxReps}), the same rotation of input sets for working sets that fit in L2, and the median.`,
    '- **Several PyTorch ways** to do a case (GEMV: `torch.mm`, `torch.mv`, `F.linear`; attention: each SDPA ' +
      'backend on contiguous caches of exactly the attended length, and `baddbmm`+softmax+`bmm`) are each ' +
      'timed; the fastest is the baseline, and `torch via` names it.',
  ];
}

function familyOrder(family: string): number {
  const index = Object.keys(FAMILIES).indexOf(family);
  return index < 0 ? Number.MAX_SAFE_INTEGER : index;
}
