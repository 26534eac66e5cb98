import { mkdir, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import {
  type Backend,
  type BackendStatus,
  backendOptionsFromEnvironment,
  type CompileProgress,
  compileProgress,
  createBackend,
  type EnvironmentVariables,
  knownBackendNames,
  onSlowBackendCompile,
  probeBackends,
} from '@rayo/core';
import { type CliOptions, parseCliArgs, USAGE, UsageError } from './args.js';
import {
  type BaselineOutcome,
  type BaselineTime,
  baselineTimes,
  buildCaseFile,
  runTorchBaseline,
} from './baseline.js';
import { type CaseResult, isFailure, runBenchmarks } from './bench.js';
import type { BenchCase, SuiteMode } from './case.js';
import { selectCases } from './case.js';
import { INT8_TOL } from './caseDefaults.js';
import { familyChart } from './chart.js';
import { formatMarkdown } from './markdown.js';
import {
  annotate,
  type BaselineStatus,
  baselineStatus,
  belowLimit,
  buildReport,
  ceilingsOf,
  formatDuration,
  formatFraction,
  formatJson,
  formatRate,
  formatSummary,
  formatTable,
  machineInfo,
  memoryLimits,
} from './report.js';
import { ceilingCase, SUITE } from './suite.js';
import { FULL_TIMING, QUICK_TIMING } from './timing.js';

export interface CliIo {
  readonly stdout: (text: string) => void;
  readonly stderr: (text: string) => void;
  /** stderr is a terminal: the compile progress line is rewritten in place there. */
  readonly stderrIsTTY?: boolean;
  /** Environment variables that name backend options (e.g. RAYO_QGEMV_VARIANT); none where absent. */
  readonly env?: EnvironmentVariables;
}

const PROCESS_IO: CliIo = {
  stdout: (text) => process.stdout.write(text),
  stderr: (text) => process.stderr.write(text),
  stderrIsTTY: process.stderr.isTTY,
  env: process.env,
};

/** Exit codes: 0 all checks passed, 1 a check failed or a backend errored, 2 usage or setup error. */
export const EXIT_OK = 0;
export const EXIT_FAILED = 1;
export const EXIT_USAGE = 2;

interface OpenBackends {
  readonly backends: Backend[];
  readonly unavailable: BackendStatus[];
}

async function openBackends(
  options: CliOptions,
  mode: SuiteMode,
  io: CliIo,
  progress: CompileProgress,
): Promise<OpenBackends | undefined> {
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
  let usable = statuses.filter((st) => st.available).map((s) => s.name);
  // The full suite would keep the plain-TypeScript backend busy for hours.
  if (!explicit && mode === 'full' && usable.length > 1 && usable.includes('cpu')) {
    usable = usable.filter((n) => n !== 'cpu');
    io.stderr(
      'rayo-bench: the full suite leaves out the cpu backend when another runs (--backend cpu runs it)\n',
    );
  }
  const backends: Backend[] = [];
  for (const name of usable) {
    try {
      // A software adapter compiles each kernel's shaders for seconds: a progress line says so.
      await onSlowBackendCompile(name, progress.onSlowCompile);
      backends.push(await createBackend(name, await backendOptionsFromEnvironment(name, io.env ?? {})));
    } catch (error) {
      const reason = (error as Error).message;
      io.stderr(`rayo-bench: backend ${name} unavailable: ${reason}\n`);
      unavailable.push({ name, available: false, reason });
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
    const calls =
      result.callsPerSample && result.callsPerSample > 1 ? ` of ${result.callsPerSample} calls` : '';
    return `${formatDuration(result.timing.median)} (${result.timing.samples} samples${calls}, ${result.timer} timer)`;
  }
  return result.status;
}

/**
 * Where RAYO_QGEMV_ACTIVATIONS=int8 asks the cuda backend to quantize x to
 * int8 blocks (d = max|x|/127 per 32), its quantized products carry about
 * 0.3% of max|y| of error on the suite's random data: their cases are checked
 * at 2% of max|y| (a wrong code, scale or offset is off by far more).
 */
export function withInt8Tolerance(
  cases: readonly BenchCase[],
  env: Readonly<Record<string, string | undefined>>,
): BenchCase[] {
  if (env.RAYO_QGEMV_ACTIVATIONS !== 'int8') return [...cases];
  return cases.map((c) => (c.family === 'qgemv' ? { ...c, tolerance: INT8_TOL } : c));
}

/** `bench-results/2025-01-02T03-04-05Z`: a folder name from a date, in UTC. */
export function defaultOutDir(date: Date): string {
  return join(
    'bench-results',
    date
      .toISOString()
      .replace(/\.\d+Z$/, 'Z')
      .replace(/:/g, '-'),
  );
}

async function writeText(file: string, text: string): Promise<void> {
  await mkdir(dirname(file), { recursive: true });
  await writeFile(file, text);
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
  const timing = options.quick ? QUICK_TIMING : FULL_TIMING;
  const cases = withInt8Tolerance(selectCases(SUITE, { mode, filter: options.filter }), io.env ?? {});
  if (cases.length === 0) {
    io.stderr(`rayo-bench: no ${mode} case matches --filter '${options.filter}'\n`);
    return EXIT_USAGE;
  }
  const progress = compileProgress({ write: io.stderr, isTTY: io.stderrIsTTY === true });
  const opened = await openBackends(options, mode, io, progress);
  if (!opened) return EXIT_USAGE;
  const { backends, unavailable } = opened;
  const date = new Date();
  const outDir = options.out ?? defaultOutDir(date);
  try {
    io.stderr(`rayo-bench (${mode}): ${cases.length} cases on ${backends.length} backend(s)\n`);
    for (const b of backends) io.stderr(`  ${b.name}: ${b.info.device}\n`);
    const ceilingCases = new Map<string, BenchCase>();
    const results = await runBenchmarks({
      backends,
      cases,
      timing,
      ceiling: (b) => {
        const c = ceilingCase(mode, b.info.limits.maxBufferBytes);
        ceilingCases.set(c.id, c);
        return c;
      },
      onStart: (index, total, backend, c) => {
        const lead = `[${index}/${total}] ${backend.name} ${c.id} … `;
        io.stderr(lead);
        progress.lead(lead);
      },
      onDone: (result) => {
        progress.settle();
        progress.lead('');
        io.stderr(`${describeResult(result)}\n`);
      },
    });

    const caseFile = buildCaseFile([...ceilingCases.values(), ...cases], mode, timing);
    const casesPath = join(outDir, 'cases.json');
    try {
      await writeText(casesPath, `${JSON.stringify(caseFile, null, 2)}\n`);
    } catch (error) {
      io.stderr(`rayo-bench: cannot write ${outDir}: ${(error as Error).message}\n`);
      return EXIT_USAGE;
    }

    let baseline: BaselineStatus = { status: 'not-run' };
    let torchTimes = new Map<string, BaselineTime>();
    if (options.baseline === 'torch') {
      io.stderr('rayo-bench: PyTorch baseline …\n');
      const outcome: BaselineOutcome = await runTorchBaseline({
        casesFile: casesPath,
        outFile: join(outDir, 'torch.json'),
        onOutput: (text) => io.stderr(text),
      });
      if (outcome.status === 'ok') {
        baseline = baselineStatus(outcome.output);
        torchTimes = baselineTimes(outcome.output, caseFile);
      } else {
        baseline = outcome;
        io.stderr(`rayo-bench: no PyTorch baseline: ${outcome.reason}\n`);
      }
    }

    const infos = backends.map((b) => b.info);
    const context = {
      backends: infos,
      ...(options.peakTflops ? { peakTflops: options.peakTflops } : {}),
      torchTimes,
    };
    const annotated = annotate(results, context);
    const limits = memoryLimits(results, infos, torchTimes);
    io.stdout(`\n${formatTable(annotated)}\n${formatSummary(results)}\n`);
    for (const c of ceilingsOf(results).values()) {
      const limit = limits.get(c.backend);
      io.stdout(
        `ceiling ${c.backend}: ${formatRate(c.gbps)} GB/s (${c.case}, ${c.timer} timer); ` +
          `memory limit ${formatRate(limit?.gbps)} GB/s (${limit?.source ?? '-'})\n`,
      );
    }
    const below = belowLimit(annotated);
    if (below.length) {
      io.stdout(
        `below half of the hardware limit: ${below.map((a) => `${a.result.backend} ${a.result.id} ${formatFraction(a.limit!.fraction, a.limit!.of)}`).join(', ')}\n`,
      );
    }
    if (baseline.status === 'unavailable') io.stdout(`PyTorch baseline not available: ${baseline.reason}\n`);

    const charts = new Map<string, string>();
    const families = [...new Set(results.map((r) => r.family))];
    const torchName = baseline.status === 'ok' && baseline.torch ? `PyTorch ${baseline.torch}` : 'PyTorch';
    const report = buildReport({
      date,
      mode,
      ...(options.filter === undefined ? {} : { filter: options.filter }),
      machine: machineInfo(),
      unavailable,
      baseline,
      results,
      ...context,
    });
    try {
      for (const family of families) {
        const svg = familyChart(family, annotated, torchTimes, torchName);
        if (!svg) continue;
        const file = `charts/${family}.svg`;
        await writeText(join(outDir, file), svg);
        charts.set(family, file);
      }
      await writeText(join(outDir, 'report.json'), formatJson(report));
      await writeText(
        join(outDir, 'report.md'),
        formatMarkdown({
          date,
          mode,
          ...(options.filter === undefined ? {} : { filter: options.filter }),
          machine: report.machine,
          backends: infos,
          unavailable,
          ...(options.peakTflops ? { peakTflops: options.peakTflops } : {}),
          baseline,
          results: annotated,
          timing,
          memoryLimits: limits,
          charts,
        }),
      );
      if (options.json !== undefined) await writeText(options.json, formatJson(report));
    } catch (error) {
      io.stderr(`rayo-bench: cannot write the report: ${(error as Error).message}\n`);
      return EXIT_USAGE;
    }
    io.stderr(`rayo-bench: wrote ${outDir} (report.md, report.json, cases.json, ${charts.size} charts)\n`);
    return results.some(isFailure) ? EXIT_FAILED : EXIT_OK;
  } finally {
    for (const b of backends) b.dispose();
  }
}
