/**
 * batch-bench's figures against concurrency as one SVG: aggregate tokens/s
 * and p50 ms per output token, each over the stream counts (a log2 axis),
 * for rayo's engine and, where the report has it, transformers' `generate`.
 * Plain SVG text: no plotting library, nothing to install on a GPU host.
 */

interface Series {
  readonly name: string;
  readonly color: string;
  readonly points: readonly (readonly [streams: number, value: number])[];
}

interface Measured {
  readonly tokensPerSecond?: number;
  readonly p50MsPerToken?: number;
}

/** What the plot reads of batch-bench's report (its `BatchBenchReport`). */
export interface BatchPlotInput {
  readonly settings: {
    readonly config: string;
    readonly dtype: string;
    readonly promptTokens: number;
    readonly newTokens: number;
  };
  readonly rayo: readonly {
    readonly batch: number;
    readonly engine?: Measured | { readonly error: string };
  }[];
  readonly torch?: unknown;
}

const PANEL = { width: 420, height: 280, left: 64, right: 16, top: 36, bottom: 44 } as const;

function xmlText(text: string): string {
  return text.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
}

/** About five round steps from 0 to past `max`. */
function ticks(max: number): number[] {
  const raw = max / 5;
  const power = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].map((m) => m * power).find((s) => s >= raw)!;
  return Array.from({ length: Math.ceil(max / step) + 1 }, (_, i) => i * step);
}

function panel(
  x0: number,
  title: string,
  unit: string,
  streams: readonly number[],
  series: readonly Series[],
): string {
  const { width, height, left, right, top, bottom } = PANEL;
  const values = series.flatMap((s) => s.points.map(([, v]) => v));
  const yTicks = ticks(Math.max(...values, 1e-9));
  const yMax = yTicks.at(-1)!;
  const lo = Math.log2(Math.min(...streams));
  const hi = Math.log2(Math.max(...streams));
  const px = (n: number) => x0 + left + ((Math.log2(n) - lo) / Math.max(hi - lo, 1)) * (width - left - right);
  const py = (v: number) => top + (1 - v / yMax) * (height - top - bottom);
  const out = [
    `<text x="${x0 + width / 2}" y="20" text-anchor="middle" font-weight="bold">${xmlText(title)}</text>`,
    `<text x="${x0 + 14}" y="${top + (height - top - bottom) / 2}" transform="rotate(-90 ${x0 + 14} ${top + (height - top - bottom) / 2})" text-anchor="middle">${xmlText(unit)}</text>`,
    `<text x="${x0 + left + (width - left - right) / 2}" y="${height - 6}" text-anchor="middle">concurrent streams</text>`,
  ];
  for (const t of yTicks) {
    out.push(
      `<line x1="${x0 + left}" x2="${x0 + width - right}" y1="${py(t)}" y2="${py(t)}" stroke="#ddd"/>`,
      `<text x="${x0 + left - 6}" y="${py(t) + 4}" text-anchor="end">${t.toLocaleString('en-US')}</text>`,
    );
  }
  for (const n of streams) {
    out.push(`<text x="${px(n)}" y="${height - bottom + 16}" text-anchor="middle">${n}</text>`);
  }
  for (const s of series) {
    if (s.points.length === 0) continue;
    const path = s.points.map(([n, v]) => `${px(n).toFixed(1)},${py(v).toFixed(1)}`).join(' ');
    out.push(`<polyline fill="none" stroke="${s.color}" stroke-width="2" points="${path}"/>`);
    for (const [n, v] of s.points) {
      out.push(`<circle cx="${px(n).toFixed(1)}" cy="${py(v).toFixed(1)}" r="3" fill="${s.color}"/>`);
    }
  }
  return out.join('\n');
}

function seriesOf(
  name: string,
  color: string,
  rows: readonly (readonly [number, Measured | undefined])[],
  pick: (m: Measured) => number | undefined,
): Series {
  const points = rows.flatMap(([n, m]) => {
    const v = m && pick(m);
    return v === undefined || !Number.isFinite(v) ? [] : [[n, v] as const];
  });
  return { name, color, points };
}

/** The report's tokens/s and p50 ms/token against the stream counts, as an SVG document. */
export function batchPlotSvg(report: BatchPlotInput): string {
  const torch = report.torch as
    | { output?: { results?: Record<string, Measured & { error?: string }> } }
    | undefined;
  const streams = report.rayo.map((r) => r.batch);
  const engine = report.rayo.map(
    (r) => [r.batch, r.engine && !('error' in r.engine) ? r.engine : undefined] as const,
  );
  const theirs = report.rayo.map((r) => {
    const base = torch?.output?.results?.[String(r.batch)];
    return [r.batch, base && base.error === undefined ? base : undefined] as const;
  });
  const lines = (pick: (m: Measured) => number | undefined) => [
    seriesOf('rayo (batched engine)', '#c2410c', engine, pick),
    seriesOf("transformers' batched generate", '#1d4ed8', theirs, pick),
  ];
  const throughput = lines((m) => m.tokensPerSecond);
  const latency = lines((m) => m.p50MsPerToken);
  const { width, height } = PANEL;
  const legend = throughput
    .filter((s) => s.points.length > 0)
    .map(
      (s, i) =>
        `<rect x="${16 + i * 260}" y="${height + 8}" width="14" height="4" fill="${s.color}"/><text x="${36 + i * 260}" y="${height + 14}">${xmlText(s.name)}</text>`,
    );
  const { config, dtype, promptTokens, newTokens } = report.settings;
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${2 * width}" height="${height + 40}" font-family="sans-serif" font-size="12">`,
    `<rect width="100%" height="100%" fill="white"/>`,
    panel(0, `aggregate tokens/s (${config} ${dtype})`, 'tokens/s', streams, throughput),
    panel(
      width,
      `p50 per output token (prompt ${promptTokens}, ${newTokens} new)`,
      'ms/token',
      streams,
      latency,
    ),
    ...legend,
    '</svg>',
    '',
  ].join('\n');
}
