import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll } from 'vitest';

/**
 * A maker of fresh temporary folders named `prefix…`: every folder it made
 * is removed after the tests of the file (or suite) that called this.
 */
export function temporaryDirectories(prefix: string): () => Promise<string> {
  const dirs: string[] = [];
  afterAll(async () => {
    for (const d of dirs) await rm(d, { recursive: true, force: true });
  });
  return async () => {
    const dir = await mkdtemp(join(tmpdir(), prefix));
    dirs.push(dir);
    return dir;
  };
}

/** A fresh temporary folder named `prefix…`, removed after the tests of the file (or suite) that made it. */
export function temporaryDirectory(prefix: string): Promise<string> {
  return temporaryDirectories(prefix)();
}
