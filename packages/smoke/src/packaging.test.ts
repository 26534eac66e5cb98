import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { cp, mkdtemp, readdir, readFile, realpath, rm, writeFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { lastJsonLine, run, runOk } from './commands.js';
import { packedTarball } from './packedPackages.js';
import { consumerTsconfig, installProject } from './project.js';

// The published packages as a user gets them: packed (as last built, once for
// every smoke test: packedPackages.ts), installed into fresh projects outside
// the workspace (one backend each), run with plain Node, type-checked as a TypeScript consumer and bundled for the
// browser. Under CI=true a missing prerequisite (pnpm, a build, a WebGPU
// adapter) is a failure; elsewhere only a missing adapter skips its test.

const WORKSPACE = fileURLToPath(new URL('../../../', import.meta.url));
const FIXTURES = fileURLToPath(new URL('../fixtures/', import.meta.url));
const PUBLISHED = ['@rayo/core', '@rayo/wgpu', '@rayo/cuda-ptx', '@rayo/train', '@rayo/bench'];
const CI = process.env.CI === 'true';
// Packing, installing and type-checking on a loaded 2-core machine.
const SLOW = 10 * 60_000;

const workspaceManifest = (dir: string) =>
  JSON.parse(readFileSync(join(WORKSPACE, dir, 'package.json'), 'utf8')) as {
    devDependencies?: Record<string, string>;
    peerDependencies?: Record<string, string>;
  };
const TYPES_NODE = workspaceManifest('.').devDependencies!['@types/node']!;
const WEBGPU = workspaceManifest('packages/wgpu').peerDependencies!.webgpu!;
const CORE_VERSION = (workspaceManifest('packages/core') as { version?: string }).version!;

let root: string;
const project = (name: string) => join(root, name);
const only = (...names: string[]) => Object.fromEntries(names.map((name) => [name, packedTarball(name)]));
const fixture = (...path: string[]) => join(FIXTURES, ...path);
const node = (dir: string, ...args: string[]) => runOk(process.execPath, args, { cwd: project(dir) });

beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), 'rayo-smoke-'));
  const storeDir = (await runOk('pnpm', ['store', 'path'], { cwd: WORKSPACE })).stdout.trim();
  await Promise.all([
    // Node with WebGPU: the user adds Dawn (an optional peer of @rayo/wgpu),
    // as the root README's Node install line says.
    installProject({
      dir: project('node-wgpu'),
      tarballs: only('@rayo/core', '@rayo/wgpu'),
      dependencies: { webgpu: WEBGPU, '@types/node': TYPES_NODE },
      fixtures: [fixture('node-wgpu'), fixture('readme.mjs')],
      storeDir,
    }),
    // A browser app: no Dawn, no @types/node.
    installProject({
      dir: project('browser'),
      tarballs: only('@rayo/core', '@rayo/wgpu'),
      fixtures: [fixture('browser'), fixture('readme.mjs')],
      storeDir,
    }),
    // CUDA in Node, with the packages that take a backend (none pulls Dawn).
    installProject({
      dir: project('cuda'),
      tarballs: only('@rayo/core', '@rayo/cuda-ptx', '@rayo/train', '@rayo/bench'),
      dependencies: { '@types/node': TYPES_NODE },
      fixtures: [fixture('cuda'), fixture('readme.mjs')],
      storeDir,
    }),
    // Made to hold two copies of core below (what nesting package managers do).
    installProject({
      dir: project('two-cores'),
      tarballs: only('@rayo/core', '@rayo/wgpu'),
      fixtures: [fixture('readme.mjs')],
      storeDir,
    }),
    // No backend package at all.
    installProject({
      dir: project('cpu'),
      tarballs: only('@rayo/core', '@rayo/train', '@rayo/bench'),
      fixtures: [fixture('cpu'), fixture('readme.mjs')],
      storeDir,
    }),
  ]);
}, SLOW);

afterAll(async () => {
  if (root) await rm(root, { recursive: true, force: true });
});

describe('the published packages', () => {
  it('ship a LICENSE, sources inside their source maps, and ^ peer ranges of core', () => {
    for (const name of PUBLISHED) {
      const inCuda = join(project('cuda'), 'node_modules', name);
      const installed = existsSync(inCuda) ? inCuda : join(project('browser'), 'node_modules', name);
      const manifest = readFileSync(join(installed, 'package.json'), 'utf8');
      expect(manifest, name).not.toContain('workspace:');
      const parsed = JSON.parse(manifest);
      expect(parsed.repository?.url, name).toMatch(/^git\+https:\/\/github\.com\//);
      expect(parsed.files, name).toEqual(expect.arrayContaining(['LICENSE', 'CHANGELOG.md']));
      expect(readFileSync(join(installed, 'LICENSE'), 'utf8'), name).toMatch(/MIT License/);
      if (name !== '@rayo/core') {
        expect(parsed.peerDependencies['@rayo/core'], name).toMatch(/^\^/);
        expect(parsed.dependencies?.['@rayo/core'], name).toBeUndefined();
      }
      const maps = readdirSync(join(installed, 'dist'), { recursive: true, encoding: 'utf8' }).filter((f) =>
        f.endsWith('.js.map'),
      );
      expect(maps.length, name).toBeGreaterThan(0);
      for (const map of maps) {
        const { sources, sourcesContent } = JSON.parse(readFileSync(join(installed, 'dist', map), 'utf8'));
        expect(sourcesContent?.length, `${name}/dist/${map}`).toBe(sources.length);
      }
    }
  });

  it(
    'core + wgpu run the README example with plain Node (Dawn on lavapipe without a GPU)',
    async (context) => {
      const result = lastJsonLine((await node('node-wgpu', 'readme.mjs', 'wgpu')).stdout);
      if (result.error && /no WebGPU adapter/.test(String(result.message)) && !CI) {
        context.skip(`no WebGPU adapter here (install Mesa lavapipe): ${result.message}`);
      }
      expect(result).toEqual({ backend: 'wgpu', first: [0.0625, 0.0625, 0.0625, 0.0625] });
    },
    SLOW,
  );

  it("the root README's install line for WebGPU in Node installs what the Node project does", () => {
    const readme = readFileSync(join(WORKSPACE, 'README.md'), 'utf8');
    const line = /^npm install ([^#\n]+?)\s+# WebGPU in Node/m.exec(readme);
    expect(line, 'README.md has no `npm install … # WebGPU in Node` line').not.toBeNull();
    const installed = JSON.parse(readFileSync(join(project('node-wgpu'), 'package.json'), 'utf8')) as {
      dependencies: Record<string, string>;
    };
    const forTypes = ['@types/node'];
    expect(line![1]!.split(/\s+/).sort()).toEqual(
      Object.keys(installed.dependencies)
        .filter((name) => !forTypes.includes(name))
        .sort(),
    );
  });

  it(
    'core + wgpu without Dawn in Node says to install webgpu',
    async () => {
      const result = lastJsonLine((await node('browser', 'readme.mjs', 'wgpu')).stdout);
      expect(result.error).toBe('BackendUnavailableError');
      expect(result.message).toMatch(
        /'webgpu' package \(Dawn for Node\) is not installed.*npm install webgpu/,
      );
    },
    SLOW,
  );

  it(
    'core + cuda-ptx (+ train, bench) pull no Dawn, write PTX without a GPU, and say why CUDA cannot run where it cannot',
    async () => {
      const store = readdirSync(join(project('cuda'), 'node_modules', '.pnpm'));
      expect(store.filter((entry) => /^(webgpu|@webgpu)/.test(entry))).toEqual([]);
      const ptx = (await node('cuda', 'ptx.mjs')).stdout;
      expect(ptx).toMatch(/\.target sm_90/);
      expect(ptx).toMatch(/\.entry copy\(/);
      const result = lastJsonLine((await node('cuda', 'readme.mjs', 'cuda')).stdout);
      if (result.error) {
        expect(result.error).toBe('BackendUnavailableError');
        expect(result.message).toMatch(/^backend 'cuda' cannot run on this machine: /);
      } else {
        expect(result).toEqual({ backend: 'cuda', first: [0.0625, 0.0625, 0.0625, 0.0625] });
      }
    },
    SLOW,
  );

  it(
    'core + train + bench load without a backend; createBackend names the package a backend needs',
    async () => {
      expect(lastJsonLine((await node('cpu', 'readme.mjs', 'cpu')).stdout)).toEqual({
        backend: 'cpu',
        first: [0.0625, 0.0625, 0.0625, 0.0625],
      });
      const { loaded, missing } = lastJsonLine((await node('cpu', 'imports.mjs')).stdout) as {
        loaded: number;
        missing: Record<string, string>;
      };
      expect(loaded).toBeGreaterThan(0);
      expect(missing.cuda).toMatch(/^BackendUnavailableError: .*unknown backend 'cuda'/);
      expect(missing.cuda).toMatch(/provided by @rayo\/cuda-ptx: install it \(npm install @rayo\/cuda-ptx\)/);
      expect(missing.wgpu).toMatch(/provided by @rayo\/wgpu: install it \(npm install @rayo\/wgpu\)/);
    },
    SLOW,
  );

  it(
    'two copies of core: createBackend names both, where each is, and how to dedupe',
    async () => {
      // pnpm links @rayo/wgpu's peer to the project's core; a real copy in
      // its place is a second core, as a package manager that nests installs.
      const store = join(project('two-cores'), 'node_modules', '.pnpm');
      const wgpu = readdirSync(store).find((entry) => entry.startsWith('@rayo+wgpu@'))!;
      const nested = join(store, wgpu, 'node_modules', '@rayo', 'core');
      const original = await realpath(nested);
      await rm(nested);
      await cp(original, nested, { recursive: true });
      const result = lastJsonLine((await node('two-cores', 'readme.mjs', 'wgpu')).stdout);
      expect(result.error).toBe('DuplicateCoreError');
      const version = CORE_VERSION.replace(/\./g, '\\.');
      expect(result.message).toMatch(
        new RegExp(
          `two copies of @rayo/core are loaded \\(this one ${version} at \\S+; also ${version} at \\S*@rayo\\+wgpu@`,
        ),
      );
      expect(result.message).toMatch(/npm dedupe/);
    },
    SLOW,
  );

  it(
    'type-check in a TypeScript consumer with skipLibCheck off, a Node-only lib included (node16 and bundler resolution)',
    async () => {
      const tsc = createRequire(import.meta.url).resolve('typescript/bin/tsc');
      // Both resolutions of a project in one tsc (build mode), which reads the
      // declarations they share once; --verbose names the config of each error.
      const checks = (
        [
          { dir: 'browser', environment: 'browser' },
          { dir: 'cuda', environment: 'node' },
          { dir: 'node-wgpu', environment: 'node-without-dom' },
        ] as const
      ).map(async ({ dir, environment }) => {
        const configs = await Promise.all(
          (['node16', 'bundler'] as const).map(async (resolution) => {
            const config = `tsconfig.${resolution}.json`;
            await writeFile(join(project(dir), config), consumerTsconfig(resolution, environment));
            return config;
          }),
        );
        const result = await run(process.execPath, [tsc, '--build', '--verbose', ...configs], {
          cwd: project(dir),
        });
        return {
          check: `${dir} (node16, bundler)`,
          code: result.code,
          output: result.stdout + result.stderr,
        };
      });
      const failed = (await Promise.all(checks)).filter((c) => c.code !== 0);
      expect(failed.map((c) => `${c.check}:\n${c.output}`).join('\n')).toBe('');
    },
    SLOW,
  );
});

describe('a browser app on core + wgpu builds with no bundler configuration', () => {
  const browserOnly = (code: string) => {
    // The browser files, not Node's: no Dawn, no disk discovery, no node: modules.
    expect(code).toContain('navigator.gpu is undefined');
    expect(code).not.toContain('Dawn for Node');
    expect(code).not.toMatch(/["']node:/);
  };

  it(
    'esbuild: the bundle knows @rayo/wgpu by name once imported',
    async () => {
      const outfile = join(project('browser'), 'esbuild', 'main.mjs');
      const result = await build({
        entryPoints: [join(project('browser'), 'main.js')],
        absWorkingDir: project('browser'),
        bundle: true,
        platform: 'browser',
        format: 'esm',
        outfile,
        logLevel: 'silent',
      });
      expect(result.errors).toEqual([]);
      expect(result.warnings).toEqual([]);
      browserOnly(await readFile(outfile, 'utf8'));
      // Run in Node, where the bundle has no navigator.gpu: wgpu is found (it
      // registered itself) and says what it lacks; cuda says what to import.
      const lines = (await node('browser', outfile)).stdout
        .trim()
        .split('\n')
        .map((l) => JSON.parse(l));
      expect(lines[0]).toEqual({ backend: 'cpu', first: [0.0625, 0.0625, 0.0625, 0.0625] });
      expect(lines[1].message).toMatch(/^backend 'wgpu' cannot run on this machine: no WebGPU here/);
      expect(lines[2].message).toMatch(
        /provided by @rayo\/cuda-ptx: add it to the project and import '@rayo\/cuda-ptx' once/,
      );
    },
    SLOW,
  );

  it(
    'Vite',
    async () => {
      const vite = join(createRequire(import.meta.url).resolve('vite/package.json'), '..', 'bin', 'vite.js');
      const { stdout, stderr } = await runOk(process.execPath, [vite, 'build'], { cwd: project('browser') });
      expect(`${stdout}${stderr}`).not.toMatch(/externalized for browser compatibility|warning/i);
      const assets = join(project('browser'), 'dist', 'assets');
      const scripts = (await readdir(assets)).filter((f) => f.endsWith('.js'));
      expect(scripts.length).toBeGreaterThan(0);
      browserOnly((await Promise.all(scripts.map((f) => readFile(join(assets, f), 'utf8')))).join('\n'));
    },
    SLOW,
  );
});
