import { describe, expect, it } from 'vitest';
import { parseCliArgs, UsageError } from './args.js';

describe('parseCliArgs', () => {
  it('has defaults', () => {
    expect(parseCliArgs([])).toEqual({
      backends: undefined,
      quick: false,
      filter: undefined,
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
