import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { assemblePtx, DEFAULT_TARGET, findPtxas, type PtxasResult } from '@rayo/cuda-ptx';
import { expect, it } from 'vitest';
import { cachedPtxasLog, keepPtxasLog } from './ptxasCache.js';

/** What `ptxas -v` prints per entry: `N bytes spill stores, M bytes spill loads`. */
const SPILL_COUNTS = /\d+ bytes spill stores, \d+ bytes spill loads/;
const SPILLS = /\b[1-9]\d* bytes spill (stores|loads)/;
const REGISTERS = /Used (\d+) registers/g;

/**
 * Assembles `ptx` for `arch` with `ptxas -v` and expects success, no warning
 * and no register spills. The spill counts must be in the log, so that their
 * absence cannot pass for "no spills".
 */
export function expectAssemblesCleanly(ptx: string, arch: string, what = arch): PtxasResult {
  const result = assembleVerbose(ptx, arch);
  expect(result.ok, `${what}: ptxas failed\n${result.log}`).toBe(true);
  expect(result.log, `${what}: ptxas -v printed no spill counts`).toMatch(SPILL_COUNTS);
  expect(result.log, `${what}: ptxas warned`).not.toMatch(/warning/i);
  expect(result.log, `${what}: the kernel spills registers`).not.toMatch(SPILLS);
  return result;
}

/** `ptxas -v` of one module, or the clean log an earlier run kept for the same text, arch and ptxas. */
function assembleVerbose(ptx: string, arch: string): PtxasResult {
  const kept = cachedPtxasLog(ptx, arch, '-v');
  if (kept !== undefined) return { ok: true, exitCode: 0, log: kept, arch };
  const result = assemblePtx(ptx, arch, { verbose: true });
  if (result.ok && !/warning/i.test(result.log)) keepPtxasLog(ptx, arch, '-v', result.log);
  return result;
}

/** A module for `expectAllAssembleCleanly`: its PTX, the arch and what a failure names. */
export interface AssemblyJob {
  readonly ptx: string;
  readonly arch: string;
  readonly what?: string;
  /** The most registers a thread of any of its entries may use (ptxas's `Used N registers`). */
  readonly maxRegisters?: number;
  /** Only success and no warning are required (a target older than the one tuned for may spill). */
  readonly spillsAllowed?: boolean;
}

/** What ptxas printed for one job's module: its entries' part of the log, and their registers. */
export interface AssembledModule {
  readonly log: string;
  /** The most registers a thread of any of its entries uses. */
  readonly registers: number;
}

const ENTRY = /(\.entry\s+)([A-Za-z_$][\w$]*)/g;
const COMPILING = /^ptxas info\s*: Compiling entry function '([^']+)'/m;
/** Modules per ptxas run: its start and set-up cost about as much as a small module's compile. */
const BATCH = 24;

/** The log of each entry, from its "Compiling entry function" line to the next one's. */
function entryLogs(log: string): Map<string, string> {
  const logs = new Map<string, string>();
  const parts = log.split(new RegExp(`(?=${COMPILING.source})`, 'm'));
  for (const part of parts) {
    const name = COMPILING.exec(part)?.[1];
    if (name !== undefined) logs.set(name, part);
  }
  return logs;
}

function registersIn(log: string): number {
  return Math.max(0, ...[...log.matchAll(REGISTERS)].map((m) => Number(m[1])));
}

/**
 * One ptxas run over all of `ptxs` for `arch`, each module's entries renamed
 * apart (ptxas takes several PTX files, each entry name once). Per module,
 * the log of its entries (names restored) when the run succeeded without a
 * warning and printed spill counts for every entry; else undefined. Nothing
 * when ptxas is missing (one module at a time then says why).
 */
function assembleTogether(ptxs: readonly string[], arch: string): (string | undefined)[] | undefined {
  const status = findPtxas();
  if (!status.available) return undefined;
  const dir = mkdtempSync(join(tmpdir(), 'rayo-ptxas-'));
  try {
    const entries: { name: string; renamed: string }[][] = [];
    const files = ptxs.map((ptx, i) => {
      const file = join(dir, `m${i}.ptx`);
      const mine: { name: string; renamed: string }[] = [];
      const renamed = ptx.replace(ENTRY, (_, head: string, name: string) => {
        mine.push({ name, renamed: `${name}_m${i}` });
        return `${head}${name}_m${i}`;
      });
      entries.push(mine);
      writeFileSync(file, renamed);
      return file;
    });
    const run = spawnSync(status.path, [`-arch=${arch}`, '-v', '-o', join(dir, 'all.cubin'), ...files], {
      encoding: 'utf8',
    });
    const log = `${run.stdout}${run.stderr}`;
    if (run.status !== 0 || /warning/i.test(log)) return undefined;
    const logs = entryLogs(log);
    return entries.map((mine) => {
      const parts = mine.map((e) => logs.get(e.renamed));
      if (mine.length === 0 || parts.some((p) => p === undefined || !SPILL_COUNTS.test(p))) return undefined;
      return mine.map((e, j) => parts[j]!.split(e.renamed).join(e.name)).join('');
    });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/**
 * Whether one ptxas run assembles all of `ptxs` for `arch` cleanly: the spill
 * counts printed for every entry, none above zero, no warning. False when
 * ptxas is missing.
 */
export function assemblesCleanlyTogether(ptxs: readonly string[], arch: string): boolean {
  const logs = assembleTogether(ptxs, arch);
  return logs?.every((log) => log !== undefined && !SPILLS.test(log)) === true;
}

/** One module's ptxas log, which must show success and no warning, and spill counts unless `spillsAllowed`. */
function expectAssembles(ptx: string, arch: string, what: string, spillsAllowed: boolean): string {
  if (!spillsAllowed) return expectAssemblesCleanly(ptx, arch, what).log;
  const result = assembleVerbose(ptx, arch);
  expect(result.ok, `${what}: ptxas failed\n${result.log}`).toBe(true);
  expect(result.log, `${what}: ptxas warned`).not.toMatch(/warning/i);
  return result.log;
}

/**
 * `expectAssemblesCleanly` for every job, in few ptxas runs: identical
 * modules of one arch are assembled once, the modules of one arch go to
 * ptxas together, a batch at a time, and a module whose entries spill fails
 * by its name (unless every job of it has `spillsAllowed`). A batch that
 * ptxas refuses or warns about is assembled again one module at a time, so
 * that the failure names its module and says what ptxas printed (and a batch
 * that ptxas cannot take together, such as modules defining the same
 * function, is still checked). Returns, per job, its module's part of the
 * log and the registers it uses, and checks each job's `maxRegisters`.
 */
export function expectAllAssembleCleanly(jobs: readonly AssemblyJob[]): AssembledModule[] {
  // Distinct texts per arch, each with the jobs that asked for it.
  const byArch = new Map<string, Map<string, number[]>>();
  jobs.forEach((job, i) => {
    const texts = byArch.get(job.arch) ?? new Map<string, number[]>();
    byArch.set(job.arch, texts);
    texts.set(job.ptx, [...(texts.get(job.ptx) ?? []), i]);
  });
  const logs: string[] = new Array(jobs.length);
  for (const [arch, texts] of byArch) {
    // Modules an earlier run assembled cleanly take the log it kept; the rest go to ptxas.
    const distinct: [string, number[]][] = [];
    for (const [ptx, users] of texts) {
      const kept = cachedPtxasLog(ptx, arch, '-v');
      if (kept === undefined) {
        distinct.push([ptx, users]);
        continue;
      }
      const what = jobs[users[0]!]!.what ?? arch;
      if (!users.every((u) => jobs[u]!.spillsAllowed === true)) {
        expect(kept, `${what}: ptxas -v printed no spill counts`).toMatch(SPILL_COUNTS);
        expect(kept, `${what}: the kernel spills registers`).not.toMatch(SPILLS);
      }
      for (const u of users) logs[u] = kept;
    }
    for (let i = 0; i < distinct.length; i += BATCH) {
      const batch = distinct.slice(i, i + BATCH);
      const together = assembleTogether(
        batch.map(([ptx]) => ptx),
        arch,
      );
      batch.forEach(([ptx, users], j) => {
        const what = jobs[users[0]!]!.what ?? arch;
        const spillsAllowed = users.every((u) => jobs[u]!.spillsAllowed === true);
        const clean = together?.[j];
        if (clean !== undefined) keepPtxasLog(ptx, arch, '-v', clean);
        const log = clean ?? expectAssembles(ptx, arch, what, spillsAllowed);
        if (!spillsAllowed) expect(log, `${what}: the kernel spills registers`).not.toMatch(SPILLS);
        for (const u of users) logs[u] = log;
      });
    }
  }
  return jobs.map((job, i) => {
    const log = logs[i]!;
    const registers = registersIn(log);
    if (job.maxRegisters !== undefined) {
      expect(registers, `${job.what ?? job.arch}: registers a thread`).toBeLessThanOrEqual(job.maxRegisters);
    }
    return { log, registers };
  });
}

/** A module to assemble: what a failure names, and how to build it. */
export type NamedModule = readonly [name: string, build: () => { emit(): string }];

/** sm_90, and the oldest target the backend emits. */
export const BOTH_TARGETS: readonly string[] = ['sm_90', DEFAULT_TARGET];

/** One module's jobs, one per arch (sm_90 and the oldest target unless given), each named by `what` and its arch. */
export function archJobs(ptx: string, what: string, archs: readonly string[] = BOTH_TARGETS): AssemblyJob[] {
  return archs.map((arch) => ({ ptx, arch, what: `${what} ${arch}` }));
}

/** One test that every module's PTX assembles cleanly for sm_90 and for the oldest target the backend emits, in few ptxas runs. */
export function itAssemblesForBothTargets(name: string, modules: readonly NamedModule[]): void {
  it(`${name} for sm_90 and ${DEFAULT_TARGET}`, () => {
    expectAllAssembleCleanly(modules.flatMap(([what, build]) => archJobs(build().emit(), what)));
  }, 60_000);
}
