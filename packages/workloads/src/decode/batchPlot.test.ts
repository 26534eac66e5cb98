import { describe, expect, it } from 'vitest';
import { batchPlotSvg } from './batchPlot.js';

const report = {
  settings: { config: 'llama-3.2-1b', dtype: 'bf16', promptTokens: 128, newTokens: 128 },
  rayo: [
    { batch: 1, engine: { tokensPerSecond: 843, p50MsPerToken: 1.145 } },
    { batch: 4, engine: { tokensPerSecond: 1881, p50MsPerToken: 2.061 } },
    { batch: 16, engine: { error: 'out of memory' } },
    { batch: 64, engine: { tokensPerSecond: 19860, p50MsPerToken: 3.157 } },
  ],
  torch: {
    status: 'ok',
    output: {
      results: {
        '1': { tokensPerSecond: 94, p50MsPerToken: 10.4 },
        '4': { error: 'failed' },
        '64': { tokensPerSecond: 5036, p50MsPerToken: 12.0 },
      },
    },
  },
};

describe('batch-bench plot', () => {
  it('draws tokens/s and p50 against the streams for rayo and transformers, leaving failed sizes out', () => {
    const svg = batchPlotSvg(report);
    expect(svg.startsWith('<svg xmlns="http://www.w3.org/2000/svg"')).toBe(true);
    expect(svg.trim().endsWith('</svg>')).toBe(true);
    // Two panels × two series; a point per measured size (rayo 3 of 4, transformers 2 of 3).
    const polylines = [...svg.matchAll(/<polyline [^>]*points="([^"]+)"/g)].map(
      (m) => m[1]!.split(' ').length,
    );
    expect(polylines).toEqual([3, 2, 3, 2]);
    expect(svg.match(/<circle /g)).toHaveLength(10);
    for (const n of [1, 4, 16, 64]) expect(svg).toContain(`>${n}</text>`);
    expect(svg).toContain("transformers' batched generate");
    expect(svg).toContain('20,000');
  });

  it('plots rayo alone when the report has no baseline', () => {
    const svg = batchPlotSvg({ ...report, torch: undefined });
    expect([...svg.matchAll(/<polyline /g)]).toHaveLength(2);
    expect(svg).not.toContain('transformers');
  });
});
