// What the tests that run Python share: the interpreter, whether they must
// run, and a scratch folder for the files they write.
import { spawnSync } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll } from 'vitest';

/** The interpreter: $PYTHON, else python3. */
export const python = process.env.PYTHON ?? 'python3';

/** CI must run the Python tests with a real interpreter; elsewhere a machine without Python skips them. */
export const needPython = spawnSync(python, ['--version']).status === 0 || process.env.CI === 'true';

/** A folder made before the test file's tests and removed after them; the getter reads its path. */
export function scratchFolder(prefix: string): () => string {
  let dir: string | undefined;
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), prefix));
  });
  afterAll(async () => {
    if (dir) await rm(dir, { recursive: true, force: true });
  });
  return () => dir!;
}
