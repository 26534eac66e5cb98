import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { assemblePtx, DEFAULT_TARGET, findPtxas, type PtxasResult } from '@rayo/cuda-ptx';
import { expect, it } from 'vitest';

/** What `ptxas -v` prints per entry: `N bytes spill stores, M bytes spill loads`. */
const SPILL_COUNTS = /\d+ bytes spill stores, \d+ bytes spill loads/;
const SPILLS = /\b[1-9]\d* bytes spill (stores|loads)/;

/**
 * Assembles `ptx` for `arch` with `ptxas -v` and expects success, no warning
 * and no register spills. The spill counts must be in the log, so that their
 * absence cannot pass for "no spills".
 */
export function expectAssemblesCleanly(ptx: string, arch: string, what = arch): PtxasResult {
  const result = assemblePtx(ptx, arch, { verbose: true });
  expect(result.ok, `${what}: ptxas failed\n${result.log}`).toBe(true);
  expect(result.log, `${what}: ptxas -v printed no spill counts`).toMatch(SPILL_COUNTS);
  expect(result.log, `${what}: ptxas warned`).not.toMatch(/warning/i);
  expect(result.log, `${what}: the kernel spills registers`).not.toMatch(SPILLS);
  return result;
}

/** A module for `expectAllAssembleCleanly`: its PTX, the arch and what a failure names. */
export interface AssemblyJob {
  readonly ptx: string;
  readonly arch: string;
  readonly what?: string;
}

const ENTRY = /(\.entry\s+)([A-Za-z_$][\w$]*)/g;
/** Modules per ptxas run: its start and set-up cost about as much as a small module's compile. */
const BATCH = 24;

/**
 * Whether one ptxas run assembles all of `ptxs` for `arch` cleanly: each
 * module's entries renamed apart (ptxas takes several PTX files, each entry
 * name once), the spill counts printed for every entry, none above zero, no
 * warning. False when ptxas is missing (one module at a time then says why).
 */
export function assemblesCleanlyTogether(ptxs: readonly string[], arch: string): boolean {
  const status = findPtxas();
  if (!status.available) return false;
  const dir = mkdtempSync(join(tmpdir(), 'rayo-ptxas-'));
  try {
    const entries: string[] = [];
    const files = ptxs.map((ptx, i) => {
      const file = join(dir, `m${i}.ptx`);
      const renamed = ptx.replace(ENTRY, (_, head: string, name: string) => {
        entries.push(`${name}_m${i}`);
        return `${head}${name}_m${i}`;
      });
      writeFileSync(file, renamed);
      return file;
    });
    const run = spawnSync(status.path, [`-arch=${arch}`, '-v', '-o', join(dir, 'all.cubin'), ...files], {
      encoding: 'utf8',
    });
    const log = `${run.stdout}${run.stderr}`;
    const counted = (entry: string) =>
      new RegExp(`Function properties for ${entry.replace(/\$/g, '\\$')}\\s+.*${SPILL_COUNTS.source}`).test(
        log,
      );
    return (
      run.status === 0 &&
      entries.length > 0 &&
      entries.every(counted) &&
      !/warning/i.test(log) &&
      !SPILLS.test(log)
    );
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/**
 * `expectAssemblesCleanly` for every job, in few ptxas runs: the modules of
 * one arch go to ptxas together, a batch at a time, and a batch that is not
 * clean is assembled again one module at a time, so that the failure names
 * its module and says what ptxas printed (and a batch that ptxas cannot take
 * together, such as modules defining the same function, is still checked).
 */
export function expectAllAssembleCleanly(jobs: readonly AssemblyJob[]): void {
  const byArch = new Map<string, AssemblyJob[]>();
  for (const job of jobs) byArch.set(job.arch, [...(byArch.get(job.arch) ?? []), job]);
  for (const [arch, list] of byArch) {
    for (let i = 0; i < list.length; i += BATCH) {
      const batch = list.slice(i, i + BATCH);
      if (
        assemblesCleanlyTogether(
          batch.map((j) => j.ptx),
          arch,
        )
      )
        continue;
      for (const job of batch) expectAssemblesCleanly(job.ptx, arch, job.what ?? arch);
    }
  }
}

/** A test that `build()`'s PTX assembles cleanly for sm_90 and for the oldest target the backend emits. */
export function itAssemblesForBothTargets(name: string, build: () => { emit(): string }): void {
  it(`${name} for sm_90 and ${DEFAULT_TARGET}`, () => {
    for (const arch of ['sm_90', DEFAULT_TARGET]) expectAssemblesCleanly(build().emit(), arch);
  }, 60_000);
}
