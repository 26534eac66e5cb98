import { mkdir, writeFile } from 'node:fs/promises';
import { dirname } from 'node:path';
import {
  type Backend,
  type BackendStatus,
  createBackend,
  knownBackendNames,
  probeBackends,
} from '@rayo/core';
import { type CliOptions, parseCliArgs, USAGE, UsageError } from './args.js';
import { type CaseResult, isFailure, runBenchmarks } from './bench.js';
import {
  buildReport,
  formatDuration,
  formatJson,
  formatSummary,
  formatTable,
  machineInfo,
} from './report.js';
import { SUITE, type SuiteMode, selectCases } from './suite.js';
import { FULL_TIMING, QUICK_TIMING } from './timing.js';

export interface CliIo {
  readonly stdout: (text: string) => void;
  readonly stderr: (text: string) => void;
}

const PROCESS_IO: CliIo = {
  stdout: (text) => process.stdout.write(text),
  stderr: (text) => process.stderr.write(text),
};

/** Exit codes: 0 all checks passed, 1 a check failed or a backend errored, 2 usage or setup error. */
export const EXIT_OK = 0;
export const EXIT_FAILED = 1;
export const EXIT_USAGE = 2;

interface OpenBackends {
  readonly backends: Backend[];
  readonly unavailable: BackendStatus[];
}

async function openBackends(options: CliOptions, io: CliIo): Promise<OpenBackends | undefined> {
  const explicit = options.backends !== undefined;
  const names = options.backends ?? knownBackendNames();
  const known = knownBackendNames();
  const unknown = names.filter((n) => !known.includes(n));
  if (unknown.length) {
    io.stderr(`rayo-bench: unknown backend '${unknown[0]}' (known: ${known.join(', ')})\n`);
    return undefined;
  }
  const statuses = await probeBackends(names);
  const unavailable = statuses.filter((s) => !s.available);
  for (const s of unavailable) {
    io.stderr(`rayo-bench: backend ${s.name} unavailable: ${s.reason ?? 'no reason given'}\n`);
  }
  if (explicit && unavailable.length) return undefined;
  const backends: Backend[] = [];
  for (const s of statuses.filter((st) => st.available)) {
    try {
      backends.push(await createBackend(s.name));
    } catch (error) {
      const reason = (error as Error).message;
      io.stderr(`rayo-bench: backend ${s.name} unavailable: ${reason}\n`);
      unavailable.push({ name: s.name, available: false, reason });
      if (explicit) {
        for (const b of backends) b.dispose();
        return undefined;
      }
    }
  }
  if (backends.length === 0) {
    io.stderr('rayo-bench: no backend can run here\n');
    return undefined;
  }
  return { backends, unavailable };
}

function describeResult(result: CaseResult): string {
  if (result.status === 'ok' && result.timing) {
    return `${formatDuration(result.timing.median)} (${result.timing.samples} runs)`;
  }
  return result.status;
}

/** Runs rayo-bench on `argv` (the arguments after the script) and returns the exit code. */
export async function main(argv: readonly string[], io: CliIo = PROCESS_IO): Promise<number> {
  let options: CliOptions;
  try {
    options = parseCliArgs(argv);
  } catch (error) {
    if (!(error instanceof UsageError)) throw error;
    io.stderr(`rayo-bench: ${error.message}\n\n${USAGE}\n`);
    return EXIT_USAGE;
  }
  if (options.help) {
    io.stdout(`${USAGE}\n`);
    return EXIT_OK;
  }
  const mode: SuiteMode = options.quick ? 'quick' : 'full';
  const cases = selectCases(SUITE, { mode, filter: options.filter });
  if (cases.length === 0) {
    io.stderr(`rayo-bench: no ${mode} case matches --filter '${options.filter}'\n`);
    return EXIT_USAGE;
  }
  const opened = await openBackends(options, io);
  if (!opened) return EXIT_USAGE;
  const { backends, unavailable } = opened;
  try {
    io.stderr(`rayo-bench (${mode}): ${cases.length} cases on ${backends.length} backend(s)\n`);
    for (const b of backends) io.stderr(`  ${b.name}: ${b.info.device}\n`);
    const date = new Date();
    const results = await runBenchmarks({
      backends,
      cases,
      timing: options.quick ? QUICK_TIMING : FULL_TIMING,
      onStart: (index, total, backend, c) => io.stderr(`[${index}/${total}] ${backend.name} ${c.id} … `),
      onDone: (result) => io.stderr(`${describeResult(result)}\n`),
    });
    io.stdout(`\n${formatTable(results)}\n${formatSummary(results)}\n`);
    if (options.json !== undefined) {
      const report = buildReport({
        date,
        mode,
        machine: machineInfo(),
        backends: backends.map((b) => b.info),
        unavailable,
        results,
      });
      try {
        await mkdir(dirname(options.json), { recursive: true });
        await writeFile(options.json, formatJson(report));
        io.stderr(`rayo-bench: wrote ${options.json}\n`);
      } catch (error) {
        io.stderr(`rayo-bench: cannot write ${options.json}: ${(error as Error).message}\n`);
        return EXIT_USAGE;
      }
    }
    return results.some(isFailure) ? EXIT_FAILED : EXIT_OK;
  } finally {
    for (const b of backends) b.dispose();
  }
}
