import type { BackendInfo } from '@rayo/core';
import {
  type AnnotatedResult,
  type BaselineStatus,
  ceilingsOf,
  formatRate,
  formatSummary,
  type MachineInfo,
  type PeakTflops,
  peakTflopsFor,
  TABLE_COLUMNS,
  TORCH_COLUMNS,
  tableRows,
} from './report.js';
import { FAMILIES } from './suite.js';

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
  /** Families with a chart, and its path relative to the Markdown file. */
  readonly charts?: ReadonlyMap<string, string>;
}

const NUMERIC = new Set(['median', 'spread', 'GFLOP/s', 'GB/s', 'ceiling', ...TORCH_COLUMNS]);

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
      return `${what.join(', ')}; fp32 with TF32 off; CUDA events after warm-up`;
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
      ['backend', 'device', 'kind', 'copy ceiling (GB/s)', 'peak (TFLOP/s)'],
      input.backends.map((b) => [
        b.name,
        b.device,
        b.kind,
        formatRate(ceilings.get(b.name)?.gbps),
        formatRate(peakTflopsFor(input.peakTflops, b.name, b.kind)),
      ]),
      new Set(['copy ceiling (GB/s)', 'peak (TFLOP/s)']),
    ),
    '',
  );
  out.push(
    '**median**: per call (per kernel for `batch`). **timer**: `device` = GPU timestamps around one ' +
      'submission of one or more calls (divided by them), `host` = wall time around the call and its sync. **ceiling**: the ' +
      'fraction of the backend’s measured copy bandwidth (`bw`, memory-bound cases) or of the given ' +
      'peak (`fp`, FLOP-bound cases). **t/torch**: rayo time / PyTorch time (below 1: rayo is faster); ' +
      '**thru/torch**: rayo throughput / PyTorch throughput.',
    '',
  );

  const withTorch = input.results.some((a) => a.torch);
  const header = withTorch ? [...TABLE_COLUMNS.slice(0, -1), ...TORCH_COLUMNS, 'status'] : [...TABLE_COLUMNS];
  const families = [...new Set(input.results.map((a) => a.result.family))].sort(
    (a, b) => familyOrder(a) - familyOrder(b),
  );
  for (const family of families) {
    const info = FAMILIES[family];
    out.push(`## ${family}${info ? `: ${info.title}` : ''}`, '');
    const chart = input.charts?.get(family);
    if (chart) out.push(`![${family}](${chart})`, '');
    const rows = input.results.filter((a) => a.result.family === family);
    out.push(markdownTable(header, tableRows(rows, withTorch), NUMERIC), '');
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

function familyOrder(family: string): number {
  const index = Object.keys(FAMILIES).indexOf(family);
  return index < 0 ? Number.MAX_SAFE_INTEGER : index;
}
