import { describe, expect, it } from 'vitest';
import type { CaseResult } from './bench.js';
import { escapeXml, familyChart, formatBytes, formatCount, formatTick, renderChart } from './chart.js';
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

function result(backend: string, id: string, x: number, ms: number | undefined): CaseResult {
  return {
    backend,
    id,
    family: id.split('/')[0]!,
    kernel: 'matmul',
    status: ms === undefined ? 'skipped' : 'ok',
    bound: 'flops',
    x,
    ...(ms === undefined ? { message: `${backend} does not implement matmul` } : { timing: summarize([ms]) }),
  };
}

const results: CaseResult[] = [
  result('cpu', 'gemm/128x128x128', 128, 4.5),
  result('cpu', 'gemm/256x256x256', 256, 36),
  result('wgpu', 'gemm/128x128x128', 128, 0.2),
  result('wgpu', 'gemm/256x256x256', 256, 0.9),
  result('cuda', 'gemm/128x128x128', 128, undefined),
  result('cpu', 'softmax/64x4096', 64 * 4096, 12),
];
const torch = new Map([
  ['gemm/128x128x128', 0.05],
  ['gemm/256x256x256', 0.12],
]);

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
  const svg = familyChart('gemm', results, torch, 'PyTorch 2.5.1')!;

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
    expect(svg).toContain('>gemm: fp32 GEMM, square N×N×N</text>');
    expect(svg).toContain('>N (log scale)</text>');
    expect(svg).toContain('>median time (log scale)</text>');
    // ticks at the measured sizes
    expect(svg).toContain('>128</text>');
    expect(svg).toContain('>256</text>');
    expect(svg).toContain('<title>wgpu gemm/256x256x256: 900 µs</title>');
    expect(svg).toContain('<title>PyTorch 2.5.1 gemm/128x128x128: 50.0 µs</title>');
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
      series: [{ name: 'x&y', points: [{ x: 4096, ms: 0.003, label: 'read/4KiB' }] }],
    });
    parseXml(svg);
    expect(svg).toContain('a &#60;b&#62; &#38; &#34;c&#34;');
    expect(svg).toContain('>4 KiB</text>');
    expect(svg).toContain('data-series="x&#38;y"');
  });
});

describe('labels', () => {
  it('format counts, bytes and tick durations compactly', () => {
    expect(formatCount(8192)).toBe('8192');
    expect(formatCount(1e6)).toBe('1M');
    expect(formatCount(1.44e9)).toBe('1.44G');
    expect(formatBytes(4096)).toBe('4 KiB');
    expect(formatBytes(256 * 2 ** 20)).toBe('256 MiB');
    expect(formatBytes(1.5 * 2 ** 30)).toBe('1.5 GiB');
    expect(formatTick(5)).toBe('5 ms');
    expect(formatTick(0.0025)).toBe('2.5 µs');
    expect(formatTick(0.5)).toBe('500 µs');
    expect(escapeXml("<'&'>")).toBe('&#60;&#39;&#38;&#39;&#62;');
  });
});
