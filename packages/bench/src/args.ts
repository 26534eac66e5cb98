import { parseArgs } from 'node:util';

export const USAGE = `Usage: rayo-bench [--backend NAME]... [--quick] [--filter TEXT] [--json FILE]

Checks every benchmark case against the reference implementation of its
kernel on seeded random inputs, then times the cases that pass. Progress goes
to stderr, the table to stdout. Exits 1 when a check fails or a backend
errors, 2 on a usage error or when no backend can run.

  --backend NAME   backend(s) to run, repeatable or comma-separated
                   (cpu, wgpu, cuda); default: every available backend
  --quick          the small suite, ~0.1 s of timing per case
  --filter TEXT    only cases whose id contains TEXT or matches it as a
                   regular expression (e.g. gemm, '^softmax/', 'x512$')
  --json FILE      also write a JSON report (machine, backends, numbers)
  --help           print this help`;

export interface CliOptions {
  /** Explicit backends; undefined: every available one. */
  readonly backends: readonly string[] | undefined;
  readonly quick: boolean;
  readonly filter: string | undefined;
  readonly json: string | undefined;
  readonly help: boolean;
}

/** A command line rayo-bench cannot run; the message says why. */
export class UsageError extends Error {
  override name = 'UsageError';
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
  return {
    backends,
    quick: values.quick ?? false,
    filter: values.filter,
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
      json: { type: 'string' },
      help: { type: 'boolean', short: 'h' },
    },
    strict: true,
    allowPositionals: true,
  });
}
