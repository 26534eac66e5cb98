import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

/**
 * C sources of fake native libraries with the signatures the koffi bindings
 * declare, so that a test can build one with the system C compiler and check
 * the binding itself (argument marshalling, out-parameters, strings).
 */
export const NATIVE_FAKE_SOURCES = {
  libcuda: fileURLToPath(new URL('../native/libcuda_fake.c', import.meta.url)),
  libnccl: fileURLToPath(new URL('../native/libnccl_fake.c', import.meta.url)),
} as const;

/** Whether the fakes can be built here (a `cc` on Linux), and why not, for a suite's title. */
export function nativeFakeGate(): { readonly skip: boolean; readonly reason: string } {
  const cc = process.platform === 'linux' ? spawnSync('cc', ['--version'], { encoding: 'utf8' }) : undefined;
  const found = cc?.status === 0;
  return { skip: !found, reason: found ? 'cc found' : 'no C compiler here' };
}

export interface NativeFake {
  /** The built shared library. */
  readonly path: string;
  /** Removes the library and its folder. */
  dispose(): void;
}

/** Builds the fake `name` into a fresh temporary folder (`<name>_fake.so`); throws with the compiler's output when that fails. */
export function buildNativeFake(name: keyof typeof NATIVE_FAKE_SOURCES): NativeFake {
  const dir = mkdtempSync(join(tmpdir(), `rayo-${name}-`));
  const path = join(dir, `${name}_fake.so`);
  const build = spawnSync('cc', ['-shared', '-fPIC', '-O1', '-o', path, NATIVE_FAKE_SOURCES[name]], {
    encoding: 'utf8',
  });
  const dispose = () => rmSync(dir, { recursive: true, force: true });
  if (build.status !== 0) {
    dispose();
    throw new Error(`cc failed: ${build.stderr}`);
  }
  return { path, dispose };
}
