import { parseArgs } from 'node:util';
import type { PeakTflops } from './report.js';

export const USAGE = `Usage: rayo-bench [--backend NAME]... [--quick] [--filter TEXT] [--out DIR]
                  [--baseline torch] [--peak-tflops N | NAME=N,...] [--json FILE]

Measures each backend's copy bandwidth (its ceiling), then checks every
benchmark case against the reference implementation of its kernel on seeded
random inputs and times the cases that pass. Progress goes to stderr, the
table to stdout; a JSON report, a Markdown report, SVG charts and the case
file of the PyTorch baseline go to the output folder. Exits 1 when a check
fails or a backend errors, 2 on a usage error or when no backend can run.

  --backend NAME     backend(s) to run, repeatable or comma-separated
                     (cpu, wgpu, cuda); default: every available backend
                     (in full mode the cpu one only when no other is)
  --quick            the small suite, ~0.1 s of timing per case
  --filter TEXT      only cases whose id contains TEXT or matches it as a
                     regular expression (e.g. gemm, '^softmax/', 'x512$')
  --out DIR          output folder (default: bench-results/<date>)
  --baseline torch   also time the cases with PyTorch on the same GPU
                     ($PYTHON or python3) and report rayo/torch ratios
  --peak-tflops N    FLOP ceiling of FLOP-bound cases: N for every GPU
                     backend, or NAME=N,... per backend
  --json FILE        also write the JSON report to FILE
  --help             print this help`;

export type BaselineName = 'torch';

export interface CliOptions {
  /** Explicit backends; undefined: every available one. */
  readonly backends: readonly string[] | undefined;
  readonly quick: boolean;
  readonly filter: string | undefined;
  /** Output folder; undefined: `bench-results/<date>`. */
  readonly out: string | undefined;
  readonly baseline: BaselineName | undefined;
  readonly peakTflops: PeakTflops | undefined;
  readonly json: string | undefined;
  readonly help: boolean;
}

/** A command line rayo-bench cannot run; the message says why. */
export class UsageError extends Error {
  override name = 'UsageError';
}

function positiveNumber(text: string, what: string): number {
  const value = Number(text);
  if (text.trim() === '' || !Number.isFinite(value) || value <= 0) {
    throw new UsageError(`${what} must be a positive number, not '${text}'`);
  }
  return value;
}

/** `51` (every GPU backend) or `cuda=51,wgpu=26` (per backend). */
export function parsePeakTflops(text: string): PeakTflops {
  const parts = text
    .split(',')
    .map((p) => p.trim())
    .filter((p) => p !== '');
  if (parts.length === 0) throw new UsageError('--peak-tflops needs a value');
  let all: number | undefined;
  const byBackend: Record<string, number> = {};
  for (const part of parts) {
    const eq = part.indexOf('=');
    if (eq < 0) {
      all = positiveNumber(part, '--peak-tflops');
    } else {
      const name = part.slice(0, eq).trim();
      if (name === '') throw new UsageError(`--peak-tflops: no backend name in '${part}'`);
      byBackend[name] = positiveNumber(part.slice(eq + 1).trim(), `--peak-tflops ${name}`);
    }
  }
  return { ...(all === undefined ? {} : { all }), ...(Object.keys(byBackend).length ? { byBackend } : {}) };
}

/** Parses the command line (without `node` and the script). Throws a UsageError. */
export function parseCliArgs(argv: readonly string[]): CliOptions {
  let parsed: ReturnType<typeof parse>;
  try {
    parsed = parse(argv);
  } catch (error) {
    throw new UsageError((error as Error).message);
  }
  const { values, positionals } = parsed;
  if (positionals.length) throw new UsageError(`unexpected argument '${positionals[0]}'`);
  let backends: string[] | undefined;
  if (values.backend) {
    backends = [
      ...new Set(
        values.backend
          .flatMap((b) => b.split(','))
          .map((b) => b.trim())
          .filter((b) => b !== ''),
      ),
    ];
    if (backends.length === 0) throw new UsageError('--backend needs a backend name');
  }
  if (values.filter !== undefined && values.filter === '') throw new UsageError('--filter needs a value');
  if (values.json !== undefined && values.json === '') throw new UsageError('--json needs a file name');
  if (values.out !== undefined && values.out === '') throw new UsageError('--out needs a folder');
  if (values.baseline !== undefined && values.baseline !== 'torch') {
    throw new UsageError(`--baseline: unknown baseline '${values.baseline}' (known: torch)`);
  }
  return {
    backends,
    quick: values.quick ?? false,
    filter: values.filter,
    out: values.out,
    baseline: values.baseline as BaselineName | undefined,
    peakTflops: values['peak-tflops'] === undefined ? undefined : parsePeakTflops(values['peak-tflops']),
    json: values.json,
    help: values.help ?? false,
  };
}

function parse(argv: readonly string[]) {
  return parseArgs({
    args: [...argv],
    options: {
      backend: { type: 'string', multiple: true },
      quick: { type: 'boolean' },
      filter: { type: 'string' },
      out: { type: 'string' },
      baseline: { type: 'string' },
      'peak-tflops': { type: 'string' },
      json: { type: 'string' },
      help: { type: 'boolean', short: 'h' },
    },
    strict: true,
    allowPositionals: true,
  });
}
