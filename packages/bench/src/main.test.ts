import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { MAX_TOL } from './caseDefaults.js';
import { defaultOutDir, EXIT_OK, EXIT_USAGE, main, withInt8Tolerance } from './main.js';
import { SUITE } from './suite.js';

async function run(argv: string[]) {
  let stdout = '';
  let stderr = '';
  const code = await main(argv, {
    stdout: (t) => {
      stdout += t;
    },
    stderr: (t) => {
      stderr += t;
    },
  });
  return { code, stdout, stderr };
}

describe('rayo-bench', () => {
  it('prints help', async () => {
    const r = await run(['--help']);
    expect(r.code).toBe(EXIT_OK);
    expect(r.stdout).toContain('Usage: rayo-bench');
    expect(r.stdout).toContain('--filter');
  });

  it('rejects an unknown option with a clear message', async () => {
    const r = await run(['--quik']);
    expect(r.code).toBe(EXIT_USAGE);
    expect(r.stderr).toMatch(/^rayo-bench: .*'--quik'/);
    expect(r.stderr).toContain('Usage: rayo-bench');
    expect(r.stdout).toBe('');
  });

  it('checks quantized products at the int8 tolerance where the environment asks for int8 activations', () => {
    const plain = withInt8Tolerance(SUITE, {});
    const int8 = withInt8Tolerance(SUITE, { RAYO_QGEMV_ACTIVATIONS: 'int8' });
    expect(plain).toEqual(SUITE);
    const qgemv = int8.filter((c) => c.family === 'qgemv');
    expect(qgemv.length).toBeGreaterThan(10);
    for (const c of qgemv) expect(c.tolerance).toEqual({ rtol: 2e-2, atol: 0, relativeTo: 'max' });
    const others = int8.filter((c) => c.family !== 'qgemv');
    expect(others).toEqual(SUITE.filter((c) => c.family !== 'qgemv'));
    expect(SUITE.find((c) => c.family === 'qgemv')!.tolerance).toEqual(MAX_TOL);
  });

  it('names the default output folder after the date', () => {
    expect(defaultOutDir(new Date('2025-01-02T03:04:05.678Z'))).toBe(
      join('bench-results', '2025-01-02T03-04-05Z'),
    );
  });

  it('rejects an unknown backend and a filter that matches nothing', async () => {
    const unknown = await run(['--backend', 'tpu', '--quick']);
    expect(unknown.code).toBe(EXIT_USAGE);
    expect(unknown.stderr).toMatch(/unknown backend 'tpu' \(known: cpu/);
    const none = await run(['--quick', '--filter', 'no-such-case']);
    expect(none.code).toBe(EXIT_USAGE);
    expect(none.stderr).toContain("no quick case matches --filter 'no-such-case'");
  });

  it('checks, times and reports a case on the cpu backend, and writes every output', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'rayo-bench-'));
    try {
      const out = join(dir, 'out');
      const file = join(dir, 'nested', 'report.json');
      const r = await run([
        '--backend',
        'cpu',
        '--quick',
        '--filter',
        '^softmax/',
        '--out',
        out,
        '--json',
        file,
      ]);
      expect(r.stderr).toContain('[1/2] cpu copy/16MiB … ');
      expect(r.stderr).toContain('[2/2] cpu softmax/64x4096 … ');
      expect(r.code).toBe(EXIT_OK);
      expect(r.stdout).toMatch(
        /backend\s+case\s+median\s+spread\s+timer\s+GFLOP\/s\s+GB\/s\s+limit\s+of limit\s+status/,
      );
      expect(r.stdout).toMatch(/cpu\s+softmax\/64x4096\s+.*\s\d+(\.\d+)?% bw\s+ok\n/);
      expect(r.stdout).toContain('2 cases: 2 ok, 0 failed (passed)');
      expect(r.stdout).toMatch(
        /ceiling cpu: [\d.]+ GB\/s \(copy\/16MiB, host timer\); memory limit [\d.]+ GB\/s \(cpu copy\/16MiB\)/,
      );
      const report = JSON.parse(await readFile(file, 'utf8'));
      expect(report.mode).toBe('quick');
      expect(report.filter).toBe('^softmax/');
      expect(report.backends[0].name).toBe('cpu');
      expect(report.backends[0].ceilingGbps).toBeGreaterThan(0);
      expect(report.backends[0].memoryLimit.gbps).toBe(report.backends[0].ceilingGbps);
      expect(report.results[1].limit).toMatchObject({ of: 'bandwidth' });
      expect(report.baseline).toEqual({ status: 'not-run' });
      expect(report.results.map((x: { case: string }) => x.case)).toEqual(['copy/16MiB', 'softmax/64x4096']);
      expect(report.results[1]).toMatchObject({ backend: 'cpu', status: 'ok', timer: 'host' });
      expect(report.results[1].timeMs.samples).toBeGreaterThanOrEqual(5);
      expect(await readFile(join(out, 'report.json'), 'utf8')).toBe(await readFile(file, 'utf8'));
      expect((await readdir(join(out, 'charts'))).sort()).toEqual(['copy.svg', 'softmax.svg']);
      const markdown = await readFile(join(out, 'report.md'), 'utf8');
      expect(markdown).toContain('![softmax](charts/softmax.svg)');
      const cases = JSON.parse(await readFile(join(out, 'cases.json'), 'utf8'));
      expect(cases.cases.map((c: { id: string }) => c.id)).toEqual(['copy/16MiB', 'softmax/64x4096']);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('reports a missing Python and still succeeds', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'rayo-bench-'));
    const python = process.env.PYTHON;
    process.env.PYTHON = join(dir, 'no-such-python');
    try {
      const r = await run([
        '--backend',
        'cpu',
        '--quick',
        '--filter',
        '^rope/',
        '--out',
        dir,
        '--baseline',
        'torch',
      ]);
      expect(r.code).toBe(EXIT_OK);
      expect(r.stdout).toContain('PyTorch baseline not available: ');
      expect(r.stdout).toContain('no-such-python was not found');
      const report = JSON.parse(await readFile(join(dir, 'report.json'), 'utf8'));
      expect(report.baseline.status).toBe('unavailable');
      expect(await readFile(join(dir, 'report.md'), 'utf8')).toContain(
        '**PyTorch baseline**: not available:',
      );
    } finally {
      if (python === undefined) delete process.env.PYTHON;
      else process.env.PYTHON = python;
      await rm(dir, { recursive: true, force: true });
    }
  });
});
