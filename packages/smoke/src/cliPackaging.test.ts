import { readFileSync } from 'node:fs';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createBackend } from '@rayo/core';
import { TextModel } from '@rayo/text';
import { writeTinyTextModel } from '@rayo/text-testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { lastJsonLine, run, runOk } from './commands.js';
import { packedTarball } from './packedPackages.js';

// The rayo CLI as a user gets it: core, train, text, server, cli and wgpu packed (as
// last built, once for every smoke test: packedPackages.ts), installed from the tarballs into a fresh project outside the
// workspace (no webgpu), and `npx rayo generate` run on a tiny model with the
// cpu backend; the text it prints is the text the workspace's TextModel
// generates from the same folder.

const WORKSPACE = fileURLToPath(new URL('../../../', import.meta.url));
const PACKED = ['@rayo/core', '@rayo/train', '@rayo/text', '@rayo/server', '@rayo/cli', '@rayo/wgpu'];
// Packing and installing on a loaded 2-core machine.
const SLOW = 10 * 60_000;

let root: string;
let project: string;
let model: string;

beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), 'rayo-cli-smoke-'));
  project = join(root, 'project');
  await mkdir(project);
  // The cli's own dependencies on core, train and text resolve to the same tarballs, not to a registry.
  const tarballs = Object.fromEntries(PACKED.map((name) => [name, `file:${packedTarball(name)}`]));
  const manifest = {
    name: 'rayo-cli-smoke',
    private: true,
    type: 'module',
    dependencies: tarballs,
    pnpm: { overrides: tarballs },
  };
  await writeFile(join(project, 'package.json'), `${JSON.stringify(manifest, null, 2)}\n`);
  const storeDir = (await runOk('pnpm', ['store', 'path'], { cwd: WORKSPACE })).stdout.trim();
  await runOk(
    'pnpm',
    [
      'install',
      '--prefer-offline',
      '--store-dir',
      storeDir,
      '--reporter',
      'silent',
      '--config.lockfile=false',
    ],
    { cwd: project },
  );
  model = await writeTinyTextModel({ dir: join(root, 'model') });
}, SLOW);

afterAll(async () => {
  if (root) await rm(root, { recursive: true, force: true });
});

describe('the rayo CLI, packed and installed', () => {
  it(
    'ships its bin and depends on core, train, text and server by ^ ranges, with the backends as optional peers',
    () => {
      const installed = (name: string) =>
        JSON.parse(readFileSync(join(project, 'node_modules', name, 'package.json'), 'utf8'));
      const cli = installed('@rayo/cli');
      expect(JSON.stringify(cli)).not.toContain('workspace:');
      expect(cli.bin).toEqual({ rayo: './bin/rayo.js' });
      for (const dep of ['@rayo/core', '@rayo/train', '@rayo/text', '@rayo/server'])
        expect(cli.dependencies[dep]).toMatch(/^\^/);
      expect(cli.peerDependenciesMeta).toEqual({
        '@rayo/cuda-ptx': { optional: true },
        '@rayo/wgpu': { optional: true },
      });
      const text = installed('@rayo/text');
      expect(text.peerDependencies).toEqual({
        '@rayo/core': expect.stringMatching(/^\^/),
        '@rayo/train': expect.stringMatching(/^\^/),
      });
      expect(Object.keys(text.dependencies).sort()).toEqual([
        '@huggingface/jinja',
        '@huggingface/tokenizers',
      ]);
      expect(Object.keys(installed('@rayo/server').dependencies).sort()).toEqual([
        '@rayo/core',
        '@rayo/text',
        '@rayo/train',
      ]);
      for (const name of ['@rayo/text', '@rayo/server', '@rayo/cli']) {
        expect(readFileSync(join(project, 'node_modules', name, 'LICENSE'), 'utf8')).toMatch(/MIT License/);
      }
    },
    SLOW,
  );

  it(
    '`npx rayo generate` on the cpu backend prints the text TextModel generates',
    async () => {
      const help = await runOk('npx', ['rayo', '--help'], { cwd: project });
      expect(help.stdout).toMatch(/^Usage: rayo <command>/);
      const result = lastJsonLine(
        (
          await runOk(
            'npx',
            [
              'rayo',
              'generate',
              '--model',
              model,
              '--backend',
              'cpu',
              '--prompt',
              'Hello',
              '-n',
              '12',
              '--json',
              '-q',
            ],
            { cwd: project },
          )
        ).stdout,
      );
      const backend = await createBackend('cpu');
      const reference = await TextModel.load(backend, model);
      try {
        let expected = '';
        for await (const delta of reference.generateText('Hello', { maxNewTokens: 12 })) expected += delta;
        expect(result).toMatchObject({ backend: 'cpu', prompt: 'Hello', text: expected, promptTokens: 6 });
      } finally {
        reference.dispose();
        backend.dispose();
      }
      const streamed = await runOk(
        'npx',
        ['rayo', 'generate', '--model', model, '--backend', 'cpu', '--prompt', 'Hello', '-n', '12'],
        { cwd: project },
      );
      expect(streamed.stdout).toBe(`${result.text}\n`);
      expect(streamed.stderr).toMatch(/21\/21 tensors[\s\S]*tokens\/s/);
    },
    SLOW,
  );

  it(
    'finds @rayo/wgpu by name, and says to install Dawn where it is missing',
    async () => {
      const failed = await run(
        'npx',
        ['rayo', 'generate', '--model', model, '--backend', 'wgpu', '--prompt', 'x'],
        {
          cwd: project,
        },
      );
      expect(failed.code).toBe(1);
      expect(failed.stderr).toMatch(
        /'webgpu' package \(Dawn for Node\) is not installed.*npm install webgpu/,
      );
    },
    SLOW,
  );
});
