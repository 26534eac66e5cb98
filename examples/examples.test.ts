import { execFile } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { probeBackends } from '@rayo/core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

// Each Node example run as a user runs it (`node <file>`, from the packages'
// builds), in its --quick setting: on cpu, and on wgpu where an adapter is
// (Mesa lavapipe in CI, where a missing adapter fails the wgpu run).
const run = promisify(execFile);
const here = import.meta.dirname;

async function example(dir: string, file: string, args: readonly string[]): Promise<string> {
  const { stdout } = await run(process.execPath, [file, ...args], { cwd: join(here, dir) });
  return stdout;
}

let out: string;
beforeAll(async () => {
  out = await mkdtemp(join(tmpdir(), 'rayo-examples-'));
});
afterAll(async () => {
  await rm(out, { recursive: true, force: true });
});

// Under CI a missing adapter is a failure; elsewhere the wgpu runs are skipped, visibly.
const [wgpu] = await probeBackends(['wgpu']);
const backends = wgpu?.available || process.env.CI === 'true' ? ['cpu', 'wgpu'] : ['cpu'];
if (!backends.includes('wgpu')) {
  describe.skip(`the examples on wgpu — no WebGPU adapter here: ${wgpu?.reason}`, () => {
    it('needs a WebGPU adapter', () => {});
  });
}

describe.each(backends)('the examples on %s', (backend) => {
  it('mnist trains an MLP and reports its test accuracy', async () => {
    const stdout = await example('mnist', 'mnist.mjs', ['--quick', '--backend', backend]);
    expect(stdout).toMatch(/test accuracy \d+\.\d+%/);
  });

  it('names trains a model and saves it as a Llama checkpoint, which decode loads and samples', async () => {
    const checkpoint = join(out, `names-${backend}`);
    const trained = await example('names', 'names.mjs', [
      '--quick',
      '--backend',
      backend,
      '--out',
      checkpoint,
    ]);
    expect(trained).toContain('wrote');
    const sampled = await example('decode', 'decode.mjs', [
      '--checkpoint',
      checkpoint,
      '--backend',
      backend,
      '--samples',
      '3',
    ]);
    const lines = sampled.trim().split('\n');
    expect(lines[0]).toContain(checkpoint);
    // Three names of the model's characters, each ended by the separator (a name may be empty).
    expect(lines.slice(1)).toHaveLength(3);
    for (const line of lines.slice(1)) expect(line).not.toContain('.');
    // The README's first commands: the rayo CLI on the folder names wrote (tokenizer, chat template,
    // generation config), on the cpu backend whichever trained it (the decode above ran on that one).
    const rayo = join(here, '..', 'packages', 'cli', 'bin', 'rayo.js');
    const { stdout } = await run(process.execPath, [
      rayo,
      'generate',
      '--model',
      checkpoint,
      '--backend',
      'cpu',
      '--prompt',
      'ma',
      '--json',
      '-q',
    ]);
    const result = JSON.parse(stdout);
    expect(result).toMatchObject({ backend: 'cpu', prompt: 'ma', promptTokens: 3 });
    // The rest of a name: letters and hyphens, ended by '.' (EOS) or at max_new_tokens (20).
    expect(result.text).toMatch(/^[a-z-]*$/);
    expect(result.generatedTokens).toBeLessThanOrEqual(20);
  });
});
