import { escapeXml } from '@rayo/bench';

/** One bar: a label and its value. */
export interface Bar {
  readonly label: string;
  readonly value: number;
}

/** A horizontal bar chart as SVG markup: one row a bar, its value and unit written after it. */
export function barChart(title: string, unit: string, bars: readonly Bar[]): string {
  const width = 640;
  const labelWidth = 200;
  const row = 26;
  const top = 30;
  const height = top + row * bars.length + 10;
  const max = Math.max(...bars.map((b) => b.value), Number.MIN_VALUE);
  const scale = (width - labelWidth - 130) / max;
  const rows = bars.map((b, i) => {
    const y = top + i * row;
    const w = Math.max(1, b.value * scale);
    return [
      `<text x="${labelWidth - 8}" y="${y + 16}" text-anchor="end">${escapeXml(b.label)}</text>`,
      `<rect x="${labelWidth}" y="${y + 4}" width="${w.toFixed(1)}" height="${row - 8}" fill="#3b6fb6"/>`,
      `<text x="${(labelWidth + w + 6).toFixed(1)}" y="${y + 16}">${b.value.toPrecision(3)} ${escapeXml(unit)}</text>`,
    ].join('');
  });
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" role="img" aria-label="${escapeXml(title)}">`,
    `<text x="0" y="16" font-weight="bold">${escapeXml(title)}</text>`,
    ...rows,
    '</svg>',
  ].join('');
}
