import { describe, expect, it } from 'vitest';
import { parseCliArgs, parsePeakTflops, UsageError } from './args.js';

describe('parseCliArgs', () => {
  it('has defaults', () => {
    expect(parseCliArgs([])).toEqual({
      backends: undefined,
      quick: false,
      filter: undefined,
      out: undefined,
      baseline: undefined,
      peakTflops: undefined,
      json: undefined,
      help: false,
    });
  });

  it('takes repeated and comma-separated backends, without duplicates', () => {
    expect(parseCliArgs(['--backend', 'cpu']).backends).toEqual(['cpu']);
    expect(parseCliArgs(['--backend', 'cpu,wgpu', '--backend', 'cuda', '--backend=cpu']).backends).toEqual([
      'cpu',
      'wgpu',
      'cuda',
    ]);
    expect(parseCliArgs(['--backend', ' cpu , wgpu ,']).backends).toEqual(['cpu', 'wgpu']);
  });

  it('reads --quick, --filter, --json and --help', () => {
    const o = parseCliArgs(['--quick', '--filter', '^gemm/', '--json', 'out/bench.json']);
    expect(o.quick).toBe(true);
    expect(o.filter).toBe('^gemm/');
    expect(o.json).toBe('out/bench.json');
    expect(parseCliArgs(['--help']).help).toBe(true);
    expect(parseCliArgs(['-h']).help).toBe(true);
  });

  it('reads --out, --baseline and --peak-tflops', () => {
    const o = parseCliArgs(['--out', 'results/run1', '--baseline', 'torch', '--peak-tflops', '51']);
    expect(o.out).toBe('results/run1');
    expect(o.baseline).toBe('torch');
    expect(o.peakTflops).toEqual({ all: 51 });
    expect(parseCliArgs(['--peak-tflops', 'cuda=51, wgpu=26.5']).peakTflops).toEqual({
      byBackend: { cuda: 51, wgpu: 26.5 },
    });
    expect(parsePeakTflops('40,cpu=0.1')).toEqual({ all: 40, byBackend: { cpu: 0.1 } });
  });

  it('rejects bad --out, --baseline and --peak-tflops values', () => {
    expect(() => parseCliArgs(['--out='])).toThrow(/folder/);
    expect(() => parseCliArgs(['--baseline', 'jax'])).toThrow(/unknown baseline 'jax' \(known: torch\)/);
    expect(() => parseCliArgs(['--peak-tflops', 'fast'])).toThrow(/positive number, not 'fast'/);
    expect(() => parseCliArgs(['--peak-tflops', '-3'])).toThrow(UsageError);
    expect(() => parseCliArgs(['--peak-tflops', 'cuda='])).toThrow(/--peak-tflops cuda/);
    expect(() => parseCliArgs(['--peak-tflops', '=5'])).toThrow(/no backend name/);
    expect(() => parseCliArgs(['--peak-tflops', ','])).toThrow(/needs a value/);
  });

  it('rejects unknown options, stray arguments and missing values', () => {
    expect(() => parseCliArgs(['--fast'])).toThrow(UsageError);
    expect(() => parseCliArgs(['--fast'])).toThrow(/--fast/);
    expect(() => parseCliArgs(['gemm'])).toThrow(/unexpected argument 'gemm'/);
    expect(() => parseCliArgs(['--backend'])).toThrow(UsageError);
    expect(() => parseCliArgs(['--backend', ','])).toThrow(/backend name/);
    expect(() => parseCliArgs(['--json='])).toThrow(/file name/);
    expect(() => parseCliArgs(['--quick=yes'])).toThrow(UsageError);
  });
});
