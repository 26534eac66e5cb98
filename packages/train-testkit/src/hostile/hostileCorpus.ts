import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { checkpointFolderCases } from './checkpointFolderCases.js';
import { ggufCases } from './ggufCases.js';
import type { HostileCase } from './hostileFiles.js';
import { safetensorsCases } from './safetensorsCases.js';
import { trainingCheckpointCases } from './trainingCheckpointCases.js';

export type { HostileCase, HostileReader } from './hostileFiles.js';

/**
 * Every hostile file of the corpus: truncations at many offsets, absurd
 * lengths and counts, out-of-range and overlapping offsets, duplicate names,
 * wrong dtypes, deep nesting, huge configs, bad shard names, FIFOs, links
 * out of the folder, for the safetensors, GGUF, training-checkpoint and
 * checkpoint-folder readers. Each must be refused with a RayoError.
 */
export function hostileCorpus(): HostileCase[] {
  return [...safetensorsCases(), ...ggufCases(), ...trainingCheckpointCases(), ...checkpointFolderCases()];
}

/** Writes the corpus under `root`, case `i` in `root/<i>`; returns each case with the path its reader opens. */
export async function writeHostileCorpus(root: string): Promise<{ case: HostileCase; path: string }[]> {
  const written: { case: HostileCase; path: string }[] = [];
  for (const [i, c] of hostileCorpus().entries()) {
    const dir = join(root, String(i));
    await mkdir(dir, { recursive: true });
    written.push({ case: c, path: await c.write(dir) });
  }
  return written;
}
