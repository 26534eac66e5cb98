/** One line of a loss curve: (step, loss) points. */
export interface LossSeries {
  readonly name: string;
  readonly color: string;
  readonly points: readonly { readonly step: number; readonly loss: number }[];
}

const W = 720;
const H = 400;
const PAD = { left: 64, right: 150, top: 40, bottom: 48 } as const;

function escapeXml(text: string): string {
  return text.replace(/[&<>"']/g, (ch) => `&#${ch.charCodeAt(0)};`);
}

/** Round steps for axis ticks: about `count` of 1, 2 or 5 times a power of ten. */
function ticks(lo: number, hi: number, count: number): number[] {
  const span = hi - lo || 1;
  const raw = span / count;
  const unit = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].map((m) => m * unit).find((s) => s >= raw)!;
  const out: number[] = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step)
    out.push(Number(v.toPrecision(10)));
  return out;
}

/**
 * A self-contained SVG of loss against step (both linear), a line per series
 * and a dashed horizontal line at `target` when given.
 */
export function lossCurveSvg(title: string, series: readonly LossSeries[], target?: number): string {
  const all = series.flatMap((s) => s.points).filter((p) => Number.isFinite(p.loss));
  const maxStep = Math.max(1, ...all.map((p) => p.step));
  const losses = [...all.map((p) => p.loss), ...(target === undefined ? [] : [target])];
  const lo = Math.max(0, Math.min(...losses) - 0.1);
  const hi = Math.max(...losses) + 0.1;
  const x = (step: number) => PAD.left + (step / maxStep) * (W - PAD.left - PAD.right);
  const y = (loss: number) => H - PAD.bottom - ((loss - lo) / (hi - lo)) * (H - PAD.top - PAD.bottom);
  const out = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" font-family="Helvetica, Arial, sans-serif" font-size="12">`,
    `<rect width="${W}" height="${H}" fill="white"/>`,
    `<text x="${PAD.left}" y="24" font-size="15" font-weight="bold">${escapeXml(title)}</text>`,
    `<rect x="${PAD.left}" y="${PAD.top}" width="${W - PAD.left - PAD.right}" height="${H - PAD.top - PAD.bottom}" fill="none" stroke="#888"/>`,
  ];
  for (const t of ticks(lo, hi, 6)) {
    out.push(
      `<line x1="${PAD.left}" y1="${y(t).toFixed(1)}" x2="${W - PAD.right}" y2="${y(t).toFixed(1)}" stroke="#e3e3e3"/>`,
      `<text x="${PAD.left - 6}" y="${(y(t) + 4).toFixed(1)}" text-anchor="end">${t}</text>`,
    );
  }
  for (const t of ticks(0, maxStep, 6)) {
    out.push(`<text x="${x(t).toFixed(1)}" y="${H - PAD.bottom + 18}" text-anchor="middle">${t}</text>`);
  }
  out.push(
    `<text x="${(PAD.left + W - PAD.right) / 2}" y="${H - 10}" text-anchor="middle">step</text>`,
    `<text x="16" y="${H / 2}" text-anchor="middle" transform="rotate(-90 16 ${H / 2})">loss (nats per character)</text>`,
  );
  if (target !== undefined) {
    out.push(
      `<line x1="${PAD.left}" y1="${y(target).toFixed(1)}" x2="${W - PAD.right}" y2="${y(target).toFixed(1)}" stroke="#333" stroke-dasharray="6 4"/>`,
      `<text x="${W - PAD.right + 6}" y="${(y(target) + 4).toFixed(1)}">target ${target}</text>`,
    );
  }
  series.forEach((s, i) => {
    const points = s.points.filter((p) => Number.isFinite(p.loss));
    if (points.length > 0) {
      const d = points
        .map((p, j) => `${j ? 'L' : 'M'}${x(p.step).toFixed(1)} ${y(p.loss).toFixed(1)}`)
        .join('');
      out.push(`<path d="${d}" fill="none" stroke="${s.color}" stroke-width="2"/>`);
    }
    const ly = PAD.top + 14 + i * 20;
    out.push(
      `<line x1="${W - PAD.right + 6}" y1="${ly}" x2="${W - PAD.right + 30}" y2="${ly}" stroke="${s.color}" stroke-width="2"/>`,
      `<text x="${W - PAD.right + 36}" y="${ly + 4}">${escapeXml(s.name)}</text>`,
    );
  });
  out.push('</svg>');
  return `${out.join('\n')}\n`;
}
