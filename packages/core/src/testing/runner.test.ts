import { execFile } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { conformanceSuite } from './conformance.js';

// The conformance runner's command line (`rayo-conformance`), run by plain
// Node as a user runs it: runner.ts and what it imports, bundled from the
// sources, so no build is needed. Its checks are the suite's, which the cpu
// backend passes in @rayo/conformance's own test; here a filter keeps the
// run short and the output is compared with the suite counted in-process.

// A filter whose checks span several groups and take a fraction of a second.
const FILTER = 'transpose';
let root: string;
let runner: string;
/** A project whose node_modules holds a backend package that implements nothing. */
let brokenProject: string;

beforeAll(async () => {
  root = mkdtempSync(join(tmpdir(), 'rayo-runner-'));
  runner = join(root, 'runner.mjs');
  await build({
    entryPoints: [fileURLToPath(new URL('./runner.ts', import.meta.url))],
    outfile: runner,
    bundle: true,
    format: 'esm',
    platform: 'node',
    // Node 20 runs no `using` declarations: esbuild lowers them.
    target: 'node20',
    conditions: ['@rayo/source'],
    logLevel: 'silent',
  });
  brokenProject = join(root, 'project');
  const pkg = join(brokenProject, 'node_modules', 'rayo-backend-broken');
  mkdirSync(pkg, { recursive: true });
  writeFileSync(
    join(pkg, 'package.json'),
    JSON.stringify({
      name: 'rayo-backend-broken',
      type: 'module',
      exports: './index.js',
      rayo: { backend: 'broken' },
    }),
  );
  writeFileSync(
    join(pkg, 'index.js'),
    `export const backendProvider = {
      name: 'broken',
      probe: async () => undefined,
      create: async () => ({ info: { name: 'broken', device: 'no device' }, supports: () => false, dispose() {} }),
    };`,
  );
});

afterAll(() => {
  rmSync(root, { recursive: true, force: true });
});

interface Run {
  readonly code: number;
  readonly stdout: string;
  readonly stderr: string;
}

function runRunner(args: readonly string[], cwd = root): Promise<Run> {
  return new Promise((resolve) => {
    execFile(process.execPath, [runner, ...args], { cwd }, (error, stdout, stderr) => {
      const code = error ? (typeof error.code === 'number' ? error.code : -1) : 0;
      resolve({ code, stdout, stderr });
    });
  });
}

describe('rayo-conformance', () => {
  it('runs the checks a filter names on the cpu backend and exits 0 when all pass', async () => {
    const { checks } = conformanceSuite({
      create: () => {
        throw new Error('counting checks creates no backend');
      },
    });
    const named = checks.filter((c) => c.name.includes(FILTER) || c.group.includes(FILTER));
    const groups = new Set(named.map((c) => c.group)).size;
    expect(named.length).toBeGreaterThan(10);
    expect(groups).toBeGreaterThan(1);

    const run = await runRunner(['--backend', 'cpu', '--filter', FILTER, '--verbose']);
    expect(run.stderr).toBe('');
    expect(run.code).toBe(0);
    const lines = run.stdout.trim().split('\n');
    expect(lines[0]).toMatch(/^rayo conformance on cpu: \S/);
    expect(lines.filter((l) => l.startsWith('ok   '))).toHaveLength(named.length);
    expect(lines).toContain(`ok   ${named[0]!.group} › ${named[0]!.name}`);
    expect(run.stdout).toMatch(new RegExp(`^${named.length} checks in ${groups} groups, \\d+\\.\\d s$`, 'm'));
    expect(lines.at(-1)).toBe(`${named.length} passed, 0 failed, 0 unsupported (refused as declared)`);
  });

  it('names each failing check and exits 1 when one fails', async () => {
    const run = await runRunner(['--backend', 'broken', '--filter', 'relu is implemented'], brokenProject);
    expect(run.code).toBe(1);
    expect(run.stdout).toContain('rayo conformance on broken: no device');
    expect(run.stdout).toMatch(/^FAIL coverage › relu is implemented and has conformance cases\n {5}\S/m);
    expect(run.stdout).toContain("backend does not implement kernel 'relu'");
    expect(run.stdout.trim().split('\n').at(-1)).toBe(
      '0 passed, 1 failed, 0 unsupported (refused as declared)',
    );
  });

  it('exits 2 with the reason for a backend it cannot create', async () => {
    const run = await runRunner(['--backend', 'no-such-backend']);
    expect(run.code).toBe(2);
    expect(run.stdout).toBe('');
    expect(run.stderr).toMatch(/^rayo-conformance: .*unknown backend 'no-such-backend'/);
  });

  it('exits 2 with the usage for an option it does not know, and prints the usage for --help', async () => {
    const bad = await runRunner(['--backnd', 'cpu']);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toMatch(/--backnd/);
    expect(bad.stderr).toContain('Usage: rayo-conformance [--backend NAME]');
    const help = await runRunner(['--help']);
    expect(help.code).toBe(0);
    expect(help.stdout).toMatch(/^Usage: rayo-conformance /);
  });
});
