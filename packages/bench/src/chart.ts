import type { CaseResult } from './bench.js';
import { formatDuration } from './report.js';
import { FAMILIES } from './suite.js';

/** One line of a chart: points (x, milliseconds), joined in x order. */
export interface ChartSeries {
  readonly name: string;
  readonly points: readonly { readonly x: number; readonly ms: number; readonly label: string }[];
  /** A reference line (PyTorch): dashed, hollow markers. */
  readonly reference?: boolean;
}

export interface ChartSpec {
  readonly title: string;
  readonly subtitle?: string;
  readonly xLabel: string;
  /** x values are bytes: labelled KiB, MiB, GiB. */
  readonly xBytes?: boolean;
  /** A second, smaller line under the label of the x tick at a value (the case it is). */
  readonly xNotes?: ReadonlyMap<number, string>;
  readonly series: readonly ChartSeries[];
}

const WIDTH = 800;
const HEIGHT = 460;
const PLOT = { left: 84, right: 560, top: 64, bottom: 396 } as const;
const LEGEND_X = 584;
const COLORS = ['#1f77b4', '#d62728', '#2ca02c', '#9467bd', '#ff7f0e', '#8c564b', '#17becf'];
const REFERENCE_COLOR = '#333333';
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
 * A log–log line chart of time per call against size, one line per series,
 * with a legend at the right. Self-contained SVG (no scripts, no external
 * fonts or styles); each series is a `<g data-series="name">`, and every
 * point has a `<title>` tooltip.
 */
export function renderChart(spec: ChartSpec): string {
  const all = spec.series.flatMap((s) => s.points);
  const [xLo, xHi] = logRange(all.map((p) => p.x));
  const [yLo, yHi] = logRange(all.map((p) => p.ms));
  const px = (x: number) => PLOT.left + ((Math.log10(x) - xLo) / (xHi - xLo)) * (PLOT.right - PLOT.left);
  const py = (ms: number) => PLOT.bottom - ((Math.log10(ms) - yLo) / (yHi - yLo)) * (PLOT.bottom - PLOT.top);
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
  const yTicks = thin(logTicks(yLo, yHi, PLOT.bottom - PLOT.top, 18), py, 18);
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
    out.push(`<text x="${PLOT.left - 8}" y="${(py(t) + 4).toFixed(1)}">${escapeXml(formatTick(t))}</text>`);
  }
  out.push('</g>');
  const midX = (PLOT.left + PLOT.right) / 2;
  const midY = (PLOT.top + PLOT.bottom) / 2;
  out.push(
    `<text x="${midX}" y="${PLOT.bottom + (notes ? 52 : 42) + extraRows * rowHeight}" text-anchor="middle" fill="#333">${escapeXml(`${spec.xLabel} (log scale)`)}</text>`,
    `<text x="18" y="${midY}" text-anchor="middle" fill="#333" transform="rotate(-90 18 ${midY})">median time (log scale)</text>`,
  );

  // Series: lines, then markers with tooltips.
  let colorIndex = 0;
  const legend: { name: string; color: string; shape: number; reference: boolean; empty: boolean }[] = [];
  spec.series.forEach((s, i) => {
    const reference = s.reference ?? false;
    const color = reference ? REFERENCE_COLOR : COLORS[colorIndex++ % COLORS.length]!;
    const shape = reference ? 0 : i;
    const points = [...s.points].filter((p) => p.x > 0 && p.ms > 0).sort((a, b) => a.x - b.x);
    legend.push({ name: s.name, color, shape, reference, empty: points.length === 0 });
    out.push(`<g data-series="${escapeXml(s.name)}">`);
    if (points.length > 1) {
      const d = points.map((p, j) => `${j ? 'L' : 'M'}${px(p.x).toFixed(1)} ${py(p.ms).toFixed(1)}`).join('');
      out.push(
        `<path d="${d}" fill="none" stroke="${color}" stroke-width="2"${reference ? ' stroke-dasharray="6 4"' : ''}/>`,
      );
    }
    for (const p of points) {
      out.push(
        `<g>${marker(shape, px(p.x), py(p.ms), color, reference)}<title>${escapeXml(`${s.name} ${p.label}: ${formatDuration(p.ms)}`)}</title></g>`,
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
      `<line x1="${LEGEND_X}" y1="${y}" x2="${LEGEND_X + 28}" y2="${y}" stroke="${entry.color}" stroke-width="2"${entry.reference ? ' stroke-dasharray="6 4"' : ''}/>`,
      marker(entry.shape, LEGEND_X + 14, y, entry.color, entry.reference),
      `<text x="${LEGEND_X + 36}" y="${y + 4}" fill="${entry.empty ? '#999' : '#222'}">${escapeXml(entry.name + (entry.empty ? ' (no result)' : ''))}</text>`,
    );
  });
  out.push('</g>');
  out.push('</svg>');
  return `${out.join('\n')}\n`;
}

/**
 * The chart of one case family: a line per backend that ran it (in the
 * order given) and, where PyTorch times exist, a dashed PyTorch line.
 * Undefined when nothing of the family was timed.
 */
export function familyChart(
  family: string,
  results: readonly CaseResult[],
  torchTimes: ReadonlyMap<string, number> = new Map(),
  torchName = 'PyTorch',
): string | undefined {
  const ofFamily = results.filter((r) => r.family === family);
  if (!ofFamily.some((r) => r.timing) && !ofFamily.some((r) => torchTimes.has(r.id))) return undefined;
  const info = FAMILIES[family] ?? { title: family, x: 'size' };
  const backends = [...new Set(ofFamily.map((r) => r.backend))];
  const series: ChartSeries[] = backends.map((backend) => ({
    name: backend,
    points: ofFamily
      .filter((r) => r.backend === backend && r.timing)
      .map((r) => ({ x: r.x, ms: r.timing!.median, label: r.id })),
  }));
  const torchPoints = new Map<string, { x: number; ms: number; label: string }>();
  for (const r of ofFamily) {
    const ms = torchTimes.get(r.id);
    if (ms !== undefined && !torchPoints.has(r.id)) torchPoints.set(r.id, { x: r.x, ms, label: r.id });
  }
  if (torchPoints.size) series.push({ name: torchName, points: [...torchPoints.values()], reference: true });
  const perKernel = family === 'batch' ? 'median time per kernel' : 'median time per call';
  const notes = new Map<number, string>();
  if (info.caseTicks) for (const r of ofFamily) notes.set(r.x, r.id.slice(r.id.indexOf('/') + 1));
  return renderChart({
    title: `${family}: ${info.title}`,
    subtitle: `${perKernel} against ${info.x}, both log scales; lower is better`,
    xLabel: info.x,
    ...(info.xBytes ? { xBytes: true } : {}),
    ...(notes.size ? { xNotes: notes } : {}),
    series,
  });
}
