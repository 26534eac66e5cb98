import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { findBackendPackages } from './backendPackages.js';
import { BackendUnavailableError, InvalidArgumentError } from './errors.js';
import {
  backendOptionsFromEnvironment,
  createBackend,
  knownBackendNames,
  onSlowBackendCompile,
  probeBackends,
  registerBackend,
} from './registry.js';

/** Writes an ESM package under `nodeModules` whose provider is named `provides`. */
function writePackage(
  nodeModules: string,
  packageName: string,
  declared: string | undefined,
  provides = declared,
): void {
  const dir = join(nodeModules, ...packageName.split('/'));
  mkdirSync(dir, { recursive: true });
  const manifest = {
    name: packageName,
    type: 'module',
    exports: { '.': './index.js' },
    ...(declared === undefined ? {} : { rayo: { backend: declared } }),
  };
  writeFileSync(join(dir, 'package.json'), JSON.stringify(manifest));
  writeFileSync(
    join(dir, 'index.js'),
    `export const backendProvider = {
      name: ${JSON.stringify(provides)},
      probe: async () => undefined,
      create: async () => ({ name: ${JSON.stringify(provides)}, from: ${JSON.stringify(packageName)} }),
    };`,
  );
}

describe('backend packages on disk', () => {
  let root: string;
  let project: string;
  const startedIn = process.cwd();

  beforeAll(() => {
    root = mkdtempSync(join(tmpdir(), 'rayo-registry-'));
    project = join(root, 'project');
    const nodeModules = join(project, 'node_modules');
    writePackage(nodeModules, '@rayo/fake-backend', 'fake');
    writePackage(nodeModules, 'rayo-backend-other', 'other');
    writePackage(nodeModules, '@rayo/not-a-backend', undefined);
    writePackage(nodeModules, '@rayo/misnamed', 'misnamed', 'something-else');
    // A second installation of 'fake' further up: the nearer one wins.
    writePackage(join(root, 'node_modules'), '@rayo/fake-elsewhere', 'fake');
    mkdirSync(join(project, 'src', 'deep'), { recursive: true });
  });

  afterAll(() => {
    process.chdir(startedIn);
    rmSync(root, { recursive: true, force: true });
  });

  it('finds packages that declare a backend, from a directory and its parents', () => {
    const found = findBackendPackages([join(project, 'src', 'deep')]);
    expect(found.map((p) => [p.backend, p.packageName]).sort()).toEqual([
      ['fake', '@rayo/fake-backend'],
      ['misnamed', '@rayo/misnamed'],
      ['other', 'rayo-backend-other'],
    ]);
    expect(findBackendPackages([join(root, 'nowhere')]).map((p) => p.packageName)).toEqual([
      '@rayo/fake-elsewhere',
    ]);
    // The first start directory wins for a name found from both.
    const both = findBackendPackages([root, project]).find((p) => p.backend === 'fake');
    expect(both?.packageName).toBe('@rayo/fake-elsewhere');
  });

  it('knows and creates the backends installed in the working directory’s project', async () => {
    process.chdir(join(project, 'src'));
    expect(knownBackendNames()).toEqual(expect.arrayContaining(['cpu', 'fake', 'other']));
    expect(knownBackendNames()).not.toContain('not-a-backend');
    const fake = (await createBackend('fake')) as unknown as { name: string; from: string };
    expect(fake).toEqual({ name: 'fake', from: '@rayo/fake-backend' });
    const statuses = await probeBackends(['other', 'misnamed']);
    expect(statuses[0]).toEqual({ name: 'other', available: true });
    expect(statuses[1]!.available).toBe(false);
    expect(statuses[1]!.reason).toMatch(
      /declares one backend and provides another.*'misnamed'.*'something-else'/,
    );
  });

  it('an unknown name lists the known backends and says how to make one known', async () => {
    process.chdir(project);
    const error = await createBackend('metal').catch((e: unknown) => e);
    expect(error).toBeInstanceOf(BackendUnavailableError);
    const { message, expected } = error as BackendUnavailableError;
    expect(expected?.split(' | ')).toEqual(expect.arrayContaining(['cpu', 'fake', 'other']));
    expect(message).toMatch(/unknown backend 'metal'/);
    expect(message).toMatch(/"rayo": \{ "backend": "<name>" \}/);
    expect(message).toMatch(/registerBackend\(provider\)/);
  });

  it('a registered provider takes precedence over an installed package', async () => {
    process.chdir(project);
    registerBackend({
      name: 'other',
      probe: async () => undefined,
      create: async () => ({ name: 'other', from: 'registerBackend' }) as never,
    });
    expect(await createBackend('other')).toEqual({ name: 'other', from: 'registerBackend' });
    expect(() => registerBackend({ name: 'broken' } as never)).toThrow(InvalidArgumentError);
  });
});

describe('registration on import', () => {
  const provider = (name: string, from: string) => ({
    name,
    probe: async () => undefined,
    create: async () => ({ name, from }) as never,
  });

  it('a package registering itself keeps what is already known', async () => {
    registerBackend(provider('self-registered', 'package'), { replace: false });
    expect(knownBackendNames()).toContain('self-registered');
    registerBackend(provider('self-registered', 'second package'), { replace: false });
    expect(await createBackend('self-registered')).toEqual({ name: 'self-registered', from: 'package' });
    // A program's own registration replaces it.
    registerBackend(provider('self-registered', 'program'));
    expect(await createBackend('self-registered')).toEqual({ name: 'self-registered', from: 'program' });
    // The built-in cpu backend is not replaced by a package's registration.
    registerBackend(provider('cpu', 'package'), { replace: false });
    expect((await createBackend('cpu')).name).toBe('cpu');
  });
});

describe('slow compiles', () => {
  it("reach a handler through the provider's onSlowCompile, and are none where it has none", async () => {
    const handlers: unknown[] = [];
    registerBackend({
      name: 'compiling',
      probe: async () => undefined,
      create: async () => ({ name: 'compiling' }) as never,
      onSlowCompile: (handler) => handlers.push(handler),
    });
    const handler = () => {};
    expect(await onSlowBackendCompile('compiling', handler)).toBe(true);
    expect(await onSlowBackendCompile('compiling', undefined)).toBe(true);
    expect(handlers).toEqual([handler, undefined]);
    expect(await onSlowBackendCompile('cpu', handler)).toBe(false);
  });
});

describe('options from the environment', () => {
  it('are what the provider reads from the variables given, and none where it reads none', async () => {
    registerBackend({
      name: 'tuned',
      probe: async () => undefined,
      create: async (options) => ({ name: 'tuned', options }) as never,
      optionsFromEnvironment: (env) => (env.TUNED_MODE ? { mode: env.TUNED_MODE } : {}),
    });
    const options = await backendOptionsFromEnvironment('tuned', { TUNED_MODE: 'fast' });
    expect(options).toEqual({ mode: 'fast' });
    expect(await createBackend('tuned', options)).toEqual({ name: 'tuned', options: { mode: 'fast' } });
    expect(await backendOptionsFromEnvironment('tuned', {})).toEqual({});
    expect(await backendOptionsFromEnvironment('cpu', { TUNED_MODE: 'fast' })).toEqual({});
    await expect(backendOptionsFromEnvironment('no-such-backend', {})).rejects.toThrow(/unknown backend/);
  });
});

describe('options a backend does not take', () => {
  const listing = (name: string, optionKeys?: readonly string[]) =>
    registerBackend({
      name,
      probe: async () => undefined,
      create: async (options) => ({ name, options }) as never,
      ...(optionKeys === undefined ? {} : { optionKeys }),
    });

  it('are an InvalidArgumentError naming them and the options it takes', async () => {
    listing('keyed', ['mode', 'level']);
    expect(await createBackend('keyed', { mode: 'fast' })).toEqual({
      name: 'keyed',
      options: { mode: 'fast' },
    });
    const typo = createBackend('keyed', { mdoe: 'fast', level: 1, extra: true });
    await expect(typo).rejects.toThrow(InvalidArgumentError);
    await expect(typo).rejects.toThrow(
      "createBackend('keyed'): unknown options 'mdoe', 'extra' (expected options among mode, level, got an object with 'mdoe', 'extra')",
    );
    listing('no-options', []);
    await expect(createBackend('no-options', { mode: 'fast' })).rejects.toThrow(
      /unknown option 'mode' \(expected no options/,
    );
    expect(await createBackend('no-options', {})).toEqual({ name: 'no-options', options: {} });
  });

  it('pass unchecked to a provider that lists no option keys', async () => {
    listing('unlisted');
    expect(await createBackend('unlisted', { anything: 1 })).toEqual({
      name: 'unlisted',
      options: { anything: 1 },
    });
  });
});
