import type { BaselineTime } from './baseline.js';
import type { CaseResult } from './bench.js';
import { type AnnotatedResult, formatDuration } from './report.js';
import { FAMILIES } from './suite.js';

/** One line of a chart: points (x, y), joined in x order. */
export interface ChartSeries {
  readonly name: string;
  readonly points: readonly { readonly x: number; readonly y: number; readonly label: string }[];
  /**
   * `reference` (PyTorch): dashed, hollow markers; `limit` (what the
   * hardware allows): dotted grey, no markers. Default: a solid line.
   */
  readonly style?: 'line' | 'reference' | 'limit';
}

/** The y axis: time on a log scale (default), or a rate on a linear scale from zero. */
export interface ChartYAxis {
  readonly label: string;
  readonly linear: boolean;
  readonly format: (y: number) => string;
}

export const TIME_AXIS: ChartYAxis = { label: 'median time', linear: false, format: (ms) => formatTick(ms) };
export const TFLOPS_AXIS: ChartYAxis = {
  label: 'TFLOP/s at the median time',
  linear: true,
  format: (t) => `${Number(t.toPrecision(3))}`,
};

export interface ChartSpec {
  readonly title: string;
  readonly subtitle?: string;
  readonly xLabel: string;
  /** x values are bytes: labelled KiB, MiB, GiB. */
  readonly xBytes?: boolean;
  /** A second, smaller line under the label of the x tick at a value (the case it is). */
  readonly xNotes?: ReadonlyMap<number, string>;
  readonly y?: ChartYAxis;
  readonly series: readonly ChartSeries[];
}

const WIDTH = 800;
const HEIGHT = 460;
const PLOT = { left: 84, right: 560, top: 64, bottom: 396 } as const;
const LEGEND_X = 584;
const COLORS = ['#1f77b4', '#d62728', '#2ca02c', '#9467bd', '#ff7f0e', '#8c564b', '#17becf'];
const REFERENCE_COLOR = '#333333';
const LIMIT_COLOR = '#999999';
const FONT = 'font-family="Helvetica, Arial, sans-serif"';

/** Text for XML content and attribute values. */
export function escapeXml(text: string): string {
  return text.replace(/[&<>"']/g, (ch) => `&#${ch.charCodeAt(0)};`);
}

/** Compact number: plain up to 99 999, then k, M, G, T with three digits. */
export function formatCount(x: number): string {
  if (Math.abs(x) < 1e5) return Number.isInteger(x) ? String(x) : x.toPrecision(3);
  const units = ['k', 'M', 'G', 'T', 'P'];
  let value = x;
  let unit = -1;
  while (Math.abs(value) >= 1000 && unit < units.length - 1) {
    value /= 1000;
    unit++;
  }
  return `${Number(value.toPrecision(3))}${units[unit]}`;
}

/** Bytes in B, KiB, MiB, GiB. */
export function formatBytes(bytes: number): string {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let value = bytes;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit++;
  }
  return `${Number(value.toPrecision(3))} ${units[unit]}`;
}

/** A tick's duration without trailing zeros: `5 ms`, `2.5 µs`. */
export function formatTick(ms: number): string {
  return formatDuration(ms).replace(/\.0+(?= )|(\.\d*?)0+(?= )/, '$1');
}

/** A log10 range around `values`, padded, at least one decade wide. */
function logRange(values: readonly number[]): [number, number] {
  const logs = values.filter((v) => v > 0 && Number.isFinite(v)).map(Math.log10);
  let lo = Math.min(...logs);
  let hi = Math.max(...logs);
  if (!Number.isFinite(lo)) [lo, hi] = [0, 1];
  const pad = Math.max(0.08 * (hi - lo), 0.1);
  lo -= pad;
  hi += pad;
  if (hi - lo < 1) {
    const mid = (hi + lo) / 2;
    [lo, hi] = [mid - 0.5, mid + 0.5];
  }
  return [lo, hi];
}

/** 1-2-5 (or decade) values inside a log10 range, thinned to `minGap` pixels over `pixels`. */
function logTicks(lo: number, hi: number, pixels: number, minGap: number): number[] {
  const perDecade = pixels / (hi - lo);
  const steps = perDecade >= minGap * 3 ? [1, 2, 5] : perDecade >= minGap * 2 ? [1, 3] : [1];
  const ticks: number[] = [];
  for (let e = Math.floor(lo); e <= Math.ceil(hi); e++) {
    for (const s of steps) {
      const v = s * 10 ** e;
      const l = Math.log10(v);
      if (l >= lo && l <= hi) ticks.push(v);
    }
  }
  if (ticks.length >= 2) return ticks;
  // Less than a tick per decade fits: every other decade.
  return ticks.length ? ticks : [10 ** Math.round((lo + hi) / 2)];
}

/** A linear range from zero to a little above the largest of `values`. */
function linearRange(values: readonly number[]): [number, number] {
  const finite = values.filter((v) => Number.isFinite(v) && v > 0);
  const hi = finite.length ? Math.max(...finite) * 1.08 : 1;
  return [0, hi];
}

/** 1-2-5 steps from zero over a linear range, about `count` of them. */
function linearTicks(hi: number, count: number): number[] {
  const rough = hi / count;
  const decade = 10 ** Math.floor(Math.log10(rough));
  const step = [1, 2, 5, 10].map((m) => m * decade).find((s) => s >= rough) ?? 10 * decade;
  const ticks: number[] = [];
  for (let v = 0; v <= hi + 1e-9 * step; v += step) ticks.push(Number(v.toPrecision(12)));
  return ticks;
}

/** Keeps ticks at least `minGap` pixels apart, in order. */
function thin(ticks: readonly number[], position: (v: number) => number, minGap: number): number[] {
  const kept: number[] = [];
  for (const t of ticks) {
    if (kept.length === 0 || Math.abs(position(t) - position(kept.at(-1)!)) >= minGap) kept.push(t);
  }
  return kept;
}

/**
 * Places tick labels on up to `rows` rows, each label at least `minGap`
 * pixels from the previous one of its row; a label that fits no row is left
 * out (its point keeps its tooltip).
 */
function labelRows(
  ticks: readonly number[],
  position: (v: number) => number,
  minGap: number,
  rows: number,
): { t: number; row: number }[] {
  const last: number[] = [];
  const placed: { t: number; row: number }[] = [];
  for (const t of ticks) {
    const x = position(t);
    for (let row = 0; row < rows; row++) {
      if (last[row] === undefined || x - last[row]! >= minGap) {
        last[row] = x;
        placed.push({ t, row });
        break;
      }
    }
  }
  return placed;
}

function marker(shape: number, x: number, y: number, color: string, hollow: boolean): string {
  const fill = hollow ? 'white' : color;
  const style = `fill="${fill}" stroke="${color}" stroke-width="1.5"`;
  const r = 4;
  switch (shape % 4) {
    case 1:
      return `<rect x="${(x - r).toFixed(1)}" y="${(y - r).toFixed(1)}" width="${2 * r}" height="${2 * r}" ${style}/>`;
    case 2:
      return `<path d="M${x.toFixed(1)} ${(y - r - 1).toFixed(1)}L${(x + r + 1).toFixed(1)} ${(y + r).toFixed(1)}L${(x - r - 1).toFixed(1)} ${(y + r).toFixed(1)}Z" ${style}/>`;
    case 3:
      return `<path d="M${x.toFixed(1)} ${(y - r - 1).toFixed(1)}L${(x + r + 1).toFixed(1)} ${y.toFixed(1)}L${x.toFixed(1)} ${(y + r + 1).toFixed(1)}L${(x - r - 1).toFixed(1)} ${y.toFixed(1)}Z" ${style}/>`;
    default:
      return `<circle cx="${x.toFixed(1)}" cy="${y.toFixed(1)}" r="${r}" ${style}/>`;
  }
}

/**
 * A line chart against size (x on a log scale), one line per series, with a
 * legend at the right: time per call on a log scale, or a rate on a linear
 * scale from zero. Self-contained SVG (no scripts, no external
 * fonts or styles); each series is a `<g data-series="name">`, and every
 * point has a `<title>` tooltip.
 */
export function renderChart(spec: ChartSpec): string {
  const yAxis = spec.y ?? TIME_AXIS;
  const all = spec.series.flatMap((s) => s.points);
  const [xLo, xHi] = logRange(all.map((p) => p.x));
  const [yLo, yHi] = yAxis.linear ? linearRange(all.map((p) => p.y)) : logRange(all.map((p) => p.y));
  const yPos = (y: number) => (yAxis.linear ? y : Math.log10(y));
  const px = (x: number) => PLOT.left + ((Math.log10(x) - xLo) / (xHi - xLo)) * (PLOT.right - PLOT.left);
  const py = (y: number) => PLOT.bottom - ((yPos(y) - yLo) / (yHi - yLo)) * (PLOT.bottom - PLOT.top);
  const distinctX = [...new Set(all.map((p) => p.x))].sort((a, b) => a - b);
  // Few sizes: ticks exactly at the measured sizes; many: a 1-2-5 scale.
  // Labels naming their case are wide: they may take a second row rather than vanish.
  const notes = spec.xNotes?.size ? spec.xNotes : undefined;
  const xTicks = labelRows(
    distinctX.length > 0 && distinctX.length <= 10
      ? distinctX
      : logTicks(xLo, xHi, PLOT.right - PLOT.left, 48),
    px,
    notes ? 96 : 56,
    notes ? 2 : 1,
  );
  const rowHeight = 30;
  const extraRows = Math.max(0, ...xTicks.map((t) => t.row));
  const height = HEIGHT + extraRows * rowHeight;
  const yTicks = yAxis.linear
    ? linearTicks(yHi, 6)
    : thin(logTicks(yLo, yHi, PLOT.bottom - PLOT.top, 18), py, 18);
  const xText = (x: number) => (spec.xBytes ? formatBytes(x) : formatCount(x));

  const out: string[] = [];
  out.push(
    `<svg xmlns="http://www.w3.org/2000/svg" width="${WIDTH}" height="${height}" viewBox="0 0 ${WIDTH} ${height}" ${FONT} font-size="12">`,
    `<title>${escapeXml(spec.title)}</title>`,
    `<rect width="${WIDTH}" height="${height}" fill="white"/>`,
    `<text x="${PLOT.left}" y="24" font-size="15" font-weight="bold">${escapeXml(spec.title)}</text>`,
  );
  if (spec.subtitle) {
    out.push(`<text x="${PLOT.left}" y="44" fill="#555">${escapeXml(spec.subtitle)}</text>`);
  }
  // Grid and ticks.
  out.push('<g stroke="#e3e3e3" stroke-width="1">');
  for (const { t } of xTicks)
    out.push(
      `<line x1="${px(t).toFixed(1)}" y1="${PLOT.top}" x2="${px(t).toFixed(1)}" y2="${PLOT.bottom}"/>`,
    );
  for (const t of yTicks)
    out.push(
      `<line x1="${PLOT.left}" y1="${py(t).toFixed(1)}" x2="${PLOT.right}" y2="${py(t).toFixed(1)}"/>`,
    );
  out.push('</g>');
  out.push(
    `<rect x="${PLOT.left}" y="${PLOT.top}" width="${PLOT.right - PLOT.left}" height="${PLOT.bottom - PLOT.top}" fill="none" stroke="#888"/>`,
  );
  out.push('<g fill="#333" text-anchor="middle">');
  for (const { t, row } of xTicks) {
    const x = px(t).toFixed(1);
    const y = PLOT.bottom + row * rowHeight;
    out.push(`<line x1="${x}" y1="${PLOT.bottom}" x2="${x}" y2="${y + 5}" stroke="#888"/>`);
    out.push(`<text x="${x}" y="${y + 19}">${escapeXml(xText(t))}</text>`);
    const note = notes?.get(t);
    if (note) out.push(`<text x="${x}" y="${y + 32}" font-size="10" fill="#666">${escapeXml(note)}</text>`);
  }
  out.push('</g>');
  out.push('<g fill="#333" text-anchor="end">');
  for (const t of yTicks) {
    out.push(
      `<line x1="${PLOT.left - 5}" y1="${py(t).toFixed(1)}" x2="${PLOT.left}" y2="${py(t).toFixed(1)}" stroke="#888"/>`,
    );
    out.push(`<text x="${PLOT.left - 8}" y="${(py(t) + 4).toFixed(1)}">${escapeXml(yAxis.format(t))}</text>`);
  }
  out.push('</g>');
  const midX = (PLOT.left + PLOT.right) / 2;
  const midY = (PLOT.top + PLOT.bottom) / 2;
  out.push(
    `<text x="${midX}" y="${PLOT.bottom + (notes ? 52 : 42) + extraRows * rowHeight}" text-anchor="middle" fill="#333">${escapeXml(`${spec.xLabel} (log scale)`)}</text>`,
    `<text x="18" y="${midY}" text-anchor="middle" fill="#333" transform="rotate(-90 18 ${midY})">${escapeXml(`${yAxis.label} (${yAxis.linear ? 'linear' : 'log'} scale)`)}</text>`,
  );

  // Series: lines, then markers with tooltips.
  let colorIndex = 0;
  const legend: { name: string; color: string; shape: number; style: string; empty: boolean }[] = [];
  const dash = (style: string) =>
    style === 'reference' ? ' stroke-dasharray="6 4"' : style === 'limit' ? ' stroke-dasharray="2 3"' : '';
  const pointText = (y: number) =>
    yAxis === TIME_AXIS ? formatDuration(y) : `${yAxis.format(y)} ${yAxis.label.split(' ')[0]}`;
  spec.series.forEach((s, i) => {
    const style = s.style ?? 'line';
    const color =
      style === 'reference'
        ? REFERENCE_COLOR
        : style === 'limit'
          ? LIMIT_COLOR
          : COLORS[colorIndex++ % COLORS.length]!;
    const shape = style === 'line' ? i : 0;
    const points = [...s.points].filter((p) => p.x > 0 && p.y > 0).sort((a, b) => a.x - b.x);
    legend.push({ name: s.name, color, shape, style, empty: points.length === 0 });
    out.push(`<g data-series="${escapeXml(s.name)}">`);
    if (points.length > 1) {
      const d = points.map((p, j) => `${j ? 'L' : 'M'}${px(p.x).toFixed(1)} ${py(p.y).toFixed(1)}`).join('');
      out.push(`<path d="${d}" fill="none" stroke="${color}" stroke-width="2"${dash(style)}/>`);
    }
    for (const p of points) {
      const title = `<title>${escapeXml(`${s.name} ${p.label}: ${pointText(p.y)}`)}</title>`;
      out.push(
        style === 'limit'
          ? `<g><circle cx="${px(p.x).toFixed(1)}" cy="${py(p.y).toFixed(1)}" r="2" fill="${color}"/>${title}</g>`
          : `<g>${marker(shape, px(p.x), py(p.y), color, style === 'reference')}${title}</g>`,
      );
    }
    out.push('</g>');
  });

  // Legend, outside the plot so that it never covers a line.
  out.push(`<g font-size="12">`);
  out.push(`<text x="${LEGEND_X}" y="${PLOT.top + 4}" font-weight="bold" fill="#333">series</text>`);
  legend.forEach((entry, i) => {
    const y = PLOT.top + 26 + i * 22;
    out.push(
      `<line x1="${LEGEND_X}" y1="${y}" x2="${LEGEND_X + 28}" y2="${y}" stroke="${entry.color}" stroke-width="2"${dash(entry.style)}/>`,
      entry.style === 'limit'
        ? ''
        : marker(entry.shape, LEGEND_X + 14, y, entry.color, entry.style === 'reference'),
      `<text x="${LEGEND_X + 36}" y="${y + 4}" fill="${entry.empty ? '#999' : '#222'}">${escapeXml(entry.name + (entry.empty ? ' (no result)' : ''))}</text>`,
    );
  });
  out.push('</g>');
  out.push('</svg>');
  return `${out.join('\n')}\n`;
}

/** Families charted as throughput (TFLOP/s, linear) rather than time: the GEMMs. */
export const THROUGHPUT_FAMILIES: ReadonlySet<string> = new Set(['gemm', 'gemm-llm', 'gemm-tb', 'gemm-ta']);

/**
 * The chart of one case family: a line per backend that ran it (in the
 * order given), a dashed PyTorch line where PyTorch times exist, and a
 * dotted line at the hardware limit where the cases have one. GEMM families
 * show TFLOP/s on a linear scale (where a gap of 30% is visible), the others
 * time per call on a log scale. Undefined when nothing of the family was timed.
 */
export function familyChart(
  family: string,
  input: readonly (CaseResult | AnnotatedResult)[],
  torchTimes: ReadonlyMap<string, BaselineTime> = new Map(),
  torchName = 'PyTorch',
): string | undefined {
  const ofFamily = input
    .map((r) => ('result' in r ? r : { result: r }))
    .filter((a) => a.result.family === family);
  if (!ofFamily.some((a) => a.result.timing) && !ofFamily.some((a) => torchTimes.has(a.result.id)))
    return undefined;
  const info = FAMILIES[family] ?? { title: family, x: 'size' };
  const throughput = THROUGHPUT_FAMILIES.has(family);
  const flopsOf = new Map(ofFamily.map((a) => [a.result.id, a.result.cost?.flops ?? 0]));
  // Time in ms, or TFLOP/s of a case's FLOPs done in `ms`.
  const value = (id: string, ms: number) => (throughput ? (flopsOf.get(id) ?? 0) / (ms * 1e9) : ms);
  const backends = [...new Set(ofFamily.map((a) => a.result.backend))];
  const series: ChartSeries[] = backends.map((backend) => ({
    name: backend,
    points: ofFamily
      .filter((a) => a.result.backend === backend && a.result.timing)
      .map(({ result: r }) => ({ x: r.x, y: value(r.id, r.timing!.median), label: r.id })),
  }));
  const torchPoints = new Map<string, { x: number; y: number; label: string }>();
  const limitPoints = new Map<string, { x: number; y: number; label: string }>();
  for (const { result: r, limit } of ofFamily) {
    const time = torchTimes.get(r.id);
    if (time !== undefined && !torchPoints.has(r.id))
      torchPoints.set(r.id, { x: r.x, y: value(r.id, time.ms), label: r.id });
    if (limit && !limitPoints.has(r.id))
      limitPoints.set(r.id, { x: r.x, y: value(r.id, limit.ms), label: r.id });
  }
  if (torchPoints.size)
    series.push({ name: torchName, points: [...torchPoints.values()], style: 'reference' });
  if (limitPoints.size)
    series.push({ name: 'hardware limit', points: [...limitPoints.values()], style: 'limit' });
  const perKernel = family === 'batch' ? 'median time per kernel' : 'median time per call';
  const notes = new Map<number, string>();
  if (info.caseTicks) for (const { result: r } of ofFamily) notes.set(r.x, r.id.slice(r.id.indexOf('/') + 1));
  return renderChart({
    title: `${family}: ${info.title}`,
    subtitle: throughput
      ? `TFLOP/s against ${info.x} (log scale), linear from zero; higher is better`
      : `${perKernel} against ${info.x}, both log scales; lower is better`,
    xLabel: info.x,
    ...(info.xBytes ? { xBytes: true } : {}),
    ...(notes.size ? { xNotes: notes } : {}),
    ...(throughput ? { y: TFLOPS_AXIS } : {}),
    series,
  });
}
