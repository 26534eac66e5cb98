import { cp, mkdir, stat, writeFile } from 'node:fs/promises';
import { basename, join } from 'node:path';
import { runOk } from './commands.js';

export interface ProjectSpec {
  /** The directory to create. */
  readonly dir: string;
  /** Packed rayo packages to install: name → tarball path. */
  readonly tarballs: Readonly<Record<string, string>>;
  /** Registry packages to install beside them: name → range. */
  readonly dependencies?: Readonly<Record<string, string>>;
  /** Fixture files and folders to copy in (their contents, for a folder). */
  readonly fixtures: readonly string[];
  /** The pnpm store the workspace installed from: everything is already in it. */
  readonly storeDir: string;
}

/**
 * A fresh project outside the workspace, as a user's would be, with the
 * tarballs installed by pnpm from the workspace's store (the registry is asked
 * only for metadata it lacks).
 */
export async function installProject(spec: ProjectSpec): Promise<void> {
  await mkdir(spec.dir, { recursive: true });
  const dependencies: Record<string, string> = { ...spec.dependencies };
  for (const [name, tarball] of Object.entries(spec.tarballs)) dependencies[name] = `file:${tarball}`;
  const manifest = { name: 'rayo-smoke-consumer', private: true, type: 'module', dependencies };
  await writeFile(join(spec.dir, 'package.json'), `${JSON.stringify(manifest, null, 2)}\n`);
  for (const fixture of spec.fixtures) {
    const into = (await stat(fixture)).isDirectory() ? spec.dir : join(spec.dir, basename(fixture));
    await cp(fixture, into, { recursive: true });
  }
  await runOk(
    'pnpm',
    [
      'install',
      '--prefer-offline',
      '--store-dir',
      spec.storeDir,
      '--reporter',
      'silent',
      '--config.lockfile=false',
    ],
    { cwd: spec.dir },
  );
}

/**
 * Where a consumer runs: a browser (the DOM's types, no others), Node (Node's
 * types), or Node with a Node-only lib (ES2022 and Node's types, no DOM),
 * where @rayo/wgpu's declarations must not need WebGPU's (which name DOM
 * types).
 */
export type ConsumerEnvironment = 'browser' | 'node' | 'node-without-dom';

/**
 * A consumer's tsconfig: strict, skipLibCheck off, for one module resolution.
 */
export function consumerTsconfig(resolution: 'node16' | 'bundler', environment: ConsumerEnvironment): string {
  const modules =
    resolution === 'node16'
      ? { module: 'node16', moduleResolution: 'node16' }
      : { module: 'esnext', moduleResolution: 'bundler' };
  const compilerOptions = {
    ...modules,
    target: 'ES2023',
    lib:
      environment === 'node-without-dom'
        ? ['ES2022']
        : ['ES2023', 'ESNext.Disposable', ...(environment === 'browser' ? ['DOM'] : [])],
    strict: true,
    noEmit: true,
    skipLibCheck: false,
    types: environment === 'browser' ? [] : ['node'],
  };
  return `${JSON.stringify({ compilerOptions, files: ['consumer.ts'] }, null, 2)}\n`;
}
