import { createHash } from 'node:crypto';
import { mkdirSync, readFileSync, renameSync, statSync, writeFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { findPtxas } from '@rayo/cuda-ptx';

// The logs of modules that ptxas assembled cleanly, kept between test runs
// the way Mesa keeps its compiled shaders: a module's text, the arch and
// ptxas itself (its path, version, size and modification time) name the
// entry, so a changed module, target or toolkit is assembled again. Only
// clean results are kept: a failure or a warning is always ptxas's own.
// RAYO_PTXAS_CACHE=0 turns it off; another value names the folder (default
// $XDG_CACHE_HOME/rayo-ptxas, or ~/.cache/rayo-ptxas).

function cacheDir(): string | undefined {
  const set = process.env.RAYO_PTXAS_CACHE;
  if (set === '0') return undefined;
  if (set !== undefined && set !== '' && set !== '1') return set;
  return join(process.env.XDG_CACHE_HOME || join(homedir(), '.cache'), 'rayo-ptxas');
}

let identity: string | null | undefined;

/** What names this ptxas: undefined when there is none (then nothing is cached). */
function ptxasIdentity(): string | undefined {
  if (identity === undefined) {
    const status = findPtxas();
    if (!status.available) identity = null;
    else {
      const file = statSync(status.path);
      identity = [status.path, status.version, file.size, file.mtimeMs].join('\0');
    }
  }
  return identity ?? undefined;
}

function entryFile(ptx: string, arch: string, flags: string): string | undefined {
  const dir = cacheDir();
  const who = ptxasIdentity();
  if (dir === undefined || who === undefined) return undefined;
  const key = createHash('sha256').update(`${who}\0${arch}\0${flags}\0`).update(ptx).digest('hex');
  return join(dir, key.slice(0, 2), key);
}

/** The clean log ptxas printed for `ptx` on `arch` with `flags` in an earlier run, if kept. */
export function cachedPtxasLog(ptx: string, arch: string, flags: string): string | undefined {
  const file = entryFile(ptx, arch, flags);
  if (file === undefined) return undefined;
  try {
    return readFileSync(file, 'utf8');
  } catch {
    return undefined;
  }
}

/** Keeps a clean log (written aside and renamed, so a reader never sees half of one). */
export function keepPtxasLog(ptx: string, arch: string, flags: string, log: string): void {
  const file = entryFile(ptx, arch, flags);
  if (file === undefined) return;
  try {
    mkdirSync(join(file, '..'), { recursive: true });
    const aside = `${file}.${process.pid}.tmp`;
    writeFileSync(aside, log);
    renameSync(aside, file);
  } catch {
    // A cache that cannot be written only costs the next run its time.
  }
}
