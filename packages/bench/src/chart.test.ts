import { describe, expect, it } from 'vitest';
import type { CaseResult } from './bench.js';
import { escapeXml, familyChart, formatBytes, formatCount, formatTick, renderChart } from './chart.js';
import { annotate } from './report.js';
import { summarize } from './timing.js';

/**
 * Checks that `svg` is well-formed XML in the subset a chart uses: one root
 * element, balanced tags, quoted attributes without duplicates, and only
 * known or numeric entities. Returns the element names in document order.
 */
function parseXml(svg: string): string[] {
  const names: string[] = [];
  const stack: string[] = [];
  const text = svg.replace(/^<\?xml[^?]*\?>\s*/, '');
  const token = /<(\/?)([A-Za-z][\w:-]*)((?:\s+[\w:-]+="[^"<]*")*)\s*(\/?)>|([^<]+)|(<)/g;
  let roots = 0;
  for (const m of text.matchAll(token)) {
    const [, closing, name, attrs, selfClosing, content, stray] = m;
    if (stray) throw new Error(`stray '<' at ${m.index}`);
    if (content !== undefined) {
      if (stack.length === 0 && content.trim() !== '') throw new Error(`text outside the root: ${content}`);
      for (const entity of content.match(/&[^;\s]*;?/g) ?? []) {
        if (!/^&(amp|lt|gt|quot|apos|#\d+|#x[\da-fA-F]+);$/.test(entity))
          throw new Error(`bad entity ${entity}`);
      }
      continue;
    }
    if (closing) {
      const open = stack.pop();
      if (open !== name) throw new Error(`</${name}> closes <${open}>`);
      continue;
    }
    const seen = new Set<string>();
    for (const [, attr] of (attrs ?? '').matchAll(/([\w:-]+)="/g)) {
      if (seen.has(attr!)) throw new Error(`duplicate attribute ${attr} on <${name}>`);
      seen.add(attr!);
    }
    if (stack.length === 0) roots++;
    names.push(name!);
    if (!selfClosing) stack.push(name!);
  }
  if (stack.length) throw new Error(`unclosed <${stack.join('>, <')}>`);
  if (roots !== 1) throw new Error(`${roots} root elements`);
  return names;
}

/** The text of every `tag` element of `svg` (labels, ticks, point titles), in document order. */
function contentsOf(svg: string, tag: 'text' | 'title'): string[] {
  return [...svg.matchAll(new RegExp(`<${tag}(?:\\s[^>]*)?>([^<]*)</${tag}>`, 'g'))].map((m) => m[1]!);
}

function result(backend: string, id: string, x: number, ms: number | undefined): CaseResult {
  const family = id.split('/')[0]!;
  return {
    backend,
    id,
    family,
    kernel: family === 'attention' ? 'incrementalAttention' : 'matmul',
    status: ms === undefined ? 'skipped' : 'ok',
    bound: family === 'attention' ? 'bytes' : 'flops',
    x,
    // attention: x bytes read; gemm: 2·x³ FLOPs
    cost: family === 'attention' ? { flops: x / 2, bytes: x } : { flops: 2 * x ** 3, bytes: 12 * x * x },
    ...(ms === undefined ? { message: `${backend} does not implement it` } : { timing: summarize([ms]) }),
  };
}

const results: CaseResult[] = [
  result('cpu', 'attention/h8-d64-t128', 2 ** 20, 4.5),
  result('cpu', 'attention/h8-d64-t1024', 2 ** 23, 36),
  result('wgpu', 'attention/h8-d64-t128', 2 ** 20, 0.2),
  result('wgpu', 'attention/h8-d64-t1024', 2 ** 23, 0.9),
  result('cuda', 'attention/h8-d64-t128', 2 ** 20, undefined),
  result('cpu', 'softmax/64x4096', 64 * 4096, 12),
];
const torch = new Map([
  ['attention/h8-d64-t128', { ms: 0.05 }],
  ['attention/h8-d64-t1024', { ms: 0.12 }],
]);
const infos = [
  { name: 'cpu', kind: 'cpu' as const },
  { name: 'wgpu', kind: 'gpu' as const },
  { name: 'cuda', kind: 'gpu' as const },
].map((b) => ({
  ...b,
  device: b.name,
  limits: { maxBufferBytes: 2 ** 31 },
  features: [],
}));

describe('the chart checker', () => {
  it('accepts well-formed markup and rejects broken markup', () => {
    expect(parseXml('<svg a="1"><g><text>x &amp; y</text></g><rect/></svg>')).toEqual([
      'svg',
      'g',
      'text',
      'rect',
    ]);
    expect(() => parseXml('<svg><g></svg>')).toThrow(/closes/);
    expect(() => parseXml('<svg><text>a & b</text></svg>')).toThrow(/entity/);
    expect(() => parseXml('<svg a="1" a="2"/>')).toThrow(/duplicate/);
    expect(() => parseXml('<svg/><svg/>')).toThrow(/2 root/);
    expect(() => parseXml('<svg><text>1 < 2</text></svg>')).toThrow(/stray/);
  });
});

describe('familyChart', () => {
  const svg = familyChart('attention', results, torch, 'PyTorch 2.5.1')!;

  it('is one well-formed SVG document', () => {
    const names = parseXml(svg);
    expect(names[0]).toBe('svg');
    expect(svg).toMatch(
      /^<svg xmlns="http:\/\/www.w3.org\/2000\/svg" width="\d+" height="\d+" viewBox="0 0 \d+ \d+"/,
    );
    expect(names.filter((n) => n === 'script' || n === 'foreignObject')).toEqual([]);
  });

  it('draws a line per backend of the family and a dashed PyTorch line, each in the legend', () => {
    const series = [...svg.matchAll(/<g data-series="([^"]+)">/g)].map((m) => m[1]);
    expect(series).toEqual(['cpu', 'wgpu', 'cuda', 'PyTorch 2.5.1']);
    for (const name of ['cpu', 'wgpu', 'PyTorch 2.5.1']) {
      const group = svg.slice(svg.indexOf(`data-series="${name}"`));
      expect(group.slice(0, group.indexOf('</g>\n<g')), name).toMatch(
        /<path d="M[\d.]+ [\d.]+L[\d.]+ [\d.]+"/,
      );
      expect(svg).toContain(`>${name}</text>`);
    }
    expect(svg).toContain('>cuda (no result)</text>');
    expect(svg.match(/stroke-dasharray="6 4"/g)).toHaveLength(2); // the PyTorch line and its legend entry
  });

  it('labels the title, both axes and every point', () => {
    expect(contentsOf(svg, 'text')).toEqual(
      expect.arrayContaining([
        'attention: Incremental attention (one decode step)',
        'KV bytes read (log scale)',
        'median time (log scale)',
        // ticks at the measured sizes
        '1 MiB',
        '8 MiB',
      ]),
    );
    expect(contentsOf(svg, 'title')).toEqual(
      expect.arrayContaining([
        'wgpu attention/h8-d64-t1024: 900 µs',
        'PyTorch 2.5.1 attention/h8-d64-t128: 50.0 µs',
      ]),
    );
    // one marker per point: 2 cpu, 2 wgpu, 2 PyTorch
    expect(svg.match(/<title>/g)).toHaveLength(1 + 6);
  });

  it('keeps every point inside the plot area', () => {
    for (const m of svg.matchAll(/<circle cx="([\d.]+)" cy="([\d.]+)"/g)) {
      const [x, y] = [Number(m[1]), Number(m[2])];
      expect(x).toBeGreaterThanOrEqual(84);
      expect(y).toBeGreaterThanOrEqual(64);
      expect(y).toBeLessThanOrEqual(396);
    }
  });

  it('draws the hardware limit as a dotted line where the cases have one', () => {
    // 1 MiB and 8 MiB at 1000 GB/s: 1.05 µs and 8.39 µs
    const copy: CaseResult = {
      ...result('wgpu', 'copy/1GiB', 2 ** 30, 2),
      bound: 'bytes',
      ceiling: true,
      cost: { flops: 0, bytes: 2e9 },
    };
    const annotated = annotate([copy, ...results], { backends: infos });
    const limited = familyChart('attention', annotated, torch)!;
    parseXml(limited);
    expect([...limited.matchAll(/<g data-series="([^"]+)">/g)].map((m) => m[1])).toContain('hardware limit');
    expect(contentsOf(limited, 'title')).toEqual(
      expect.arrayContaining([
        'hardware limit attention/h8-d64-t128: 1.05 µs',
        'hardware limit attention/h8-d64-t1024: 8.39 µs',
      ]),
    );
    expect(limited.match(/stroke-dasharray="2 3"/g)).toHaveLength(2); // the line and its legend entry
  });

  it('shows GEMM families as TFLOP/s on a linear scale from zero, with the peak', () => {
    const gemm = [
      result('wgpu', 'gemm/1024x1024x1024', 1024, 0.1),
      result('wgpu', 'gemm/4096x4096x4096', 4096, 4),
    ];
    const annotated = annotate(gemm, { backends: infos, peakTflops: { all: 50 } });
    const chart = familyChart('gemm', annotated, new Map([['gemm/4096x4096x4096', { ms: 2.75 }]]))!;
    parseXml(chart);
    expect(contentsOf(chart, 'text')).toContain('TFLOP/s at the median time (linear scale)');
    expect(chart).toContain('higher is better');
    // 2·1024³ FLOPs in 0.1 ms: 21.5 TFLOP/s; 2·4096³ in 4 ms: 34.4; PyTorch in 2.75 ms: 50.0
    expect(contentsOf(chart, 'title')).toEqual(
      expect.arrayContaining([
        'wgpu gemm/1024x1024x1024: 21.5 TFLOP/s',
        'wgpu gemm/4096x4096x4096: 34.4 TFLOP/s',
        'PyTorch gemm/4096x4096x4096: 50 TFLOP/s',
        'hardware limit gemm/4096x4096x4096: 50 TFLOP/s',
      ]),
    );
    // the y axis starts at zero
    expect(chart).toMatch(/y="[\d.]+">0<\/text>/);
  });

  it('leaves out families with nothing timed, and keeps other families apart', () => {
    expect(familyChart('adamw', results)).toBeUndefined();
    const softmax = familyChart('softmax', results)!;
    parseXml(softmax);
    expect([...softmax.matchAll(/data-series="([^"]+)"/g)].map((m) => m[1])).toEqual(['cpu']);
    expect(softmax).not.toContain('PyTorch');
  });
});

describe('renderChart', () => {
  it('escapes text and survives a single point', () => {
    const svg = renderChart({
      title: 'a <b> & "c"',
      xLabel: 'bytes',
      xBytes: true,
      series: [{ name: 'x&y', points: [{ x: 4096, y: 0.003, label: 'read/4KiB' }] }],
    });
    parseXml(svg);
    expect(svg).toContain('a &#60;b&#62; &#38; &#34;c&#34;');
    expect(svg).toContain('>4 KiB</text>');
    expect(svg).toContain('data-series="x&#38;y"');
  });
});

describe('labels', () => {
  it('format counts, bytes and tick durations compactly', () => {
    const cases: [(value: number) => string, number, string][] = [
      [formatCount, 8192, '8192'],
      [formatCount, 1e6, '1M'],
      [formatCount, 1.44e9, '1.44G'],
      [formatBytes, 4096, '4 KiB'],
      [formatBytes, 256 * 2 ** 20, '256 MiB'],
      [formatBytes, 1.5 * 2 ** 30, '1.5 GiB'],
      [formatTick, 5, '5 ms'],
      [formatTick, 0.0025, '2.5 µs'],
      [formatTick, 0.5, '500 µs'],
    ];
    for (const [format, value, text] of cases) expect(format(value), `${format.name}(${value})`).toBe(text);
    expect(escapeXml("<'&'>")).toBe('&#60;&#39;&#38;&#39;&#62;');
  });
});
