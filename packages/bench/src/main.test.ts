import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { EXIT_OK, EXIT_USAGE, main } from './main.js';

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

  it('rejects an unknown backend and a filter that matches nothing', async () => {
    const unknown = await run(['--backend', 'tpu', '--quick']);
    expect(unknown.code).toBe(EXIT_USAGE);
    expect(unknown.stderr).toMatch(/unknown backend 'tpu' \(known: cpu/);
    const none = await run(['--quick', '--filter', 'no-such-case']);
    expect(none.code).toBe(EXIT_USAGE);
    expect(none.stderr).toContain("no quick case matches --filter 'no-such-case'");
  });

  it('checks, times and reports a case on the cpu backend', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'rayo-bench-'));
    try {
      const file = join(dir, 'nested', 'report.json');
      const r = await run(['--backend', 'cpu', '--quick', '--filter', '^softmax/', '--json', file]);
      expect(r.stderr).toContain('[1/1] cpu softmax/64x4096 … ');
      expect(r.code).toBe(EXIT_OK);
      expect(r.stdout).toMatch(/backend\s+case\s+median\s+spread\s+GFLOP\/s\s+GB\/s\s+status/);
      expect(r.stdout).toMatch(/cpu\s+softmax\/64x4096\s+.*\sok\n/);
      expect(r.stdout).toContain('1 case: 1 ok, 0 failed (passed)');
      const report = JSON.parse(await readFile(file, 'utf8'));
      expect(report.mode).toBe('quick');
      expect(report.backends[0].name).toBe('cpu');
      expect(report.results).toHaveLength(1);
      expect(report.results[0]).toMatchObject({ backend: 'cpu', case: 'softmax/64x4096', status: 'ok' });
      expect(report.results[0].timeMs.samples).toBeGreaterThanOrEqual(5);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
