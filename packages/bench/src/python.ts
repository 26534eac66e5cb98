import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { delimiter, dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

/** The Python module of helpers (timing, device, JSON) that every baseline script imports. */
export const SHARED_BASELINE_MODULE = 'rayo_torch.py';

/**
 * A script shipped with a package: beside a bundle that was built from
 * `base` (`./name`), or in the `baseline/` folder of the package whose
 * sources or build hold `base` (found by walking up to its `package.json`).
 */
export function findPackageScript(name: string, base: string | URL): string | undefined {
  let dir = fileURLToPath(new URL('.', base));
  for (;;) {
    for (const candidate of [join(dir, name), join(dir, 'baseline', name)]) {
      if (existsSync(candidate)) return candidate;
    }
    const parent = dirname(dir);
    if (existsSync(join(dir, 'package.json')) || parent === dir) return undefined;
    dir = parent;
  }
}

/**
 * The folder holding `rayo_torch.py`: beside a bundle, or this package's
 * `baseline/`. Scripts of other packages find it there through `PYTHONPATH`.
 */
export function sharedBaselineDir(base: string | URL = import.meta.url): string | undefined {
  const module = findPackageScript(SHARED_BASELINE_MODULE, base);
  return module === undefined ? undefined : dirname(module);
}

/** Prepends the shared module's folder to `PYTHONPATH`, keeping what was there. */
function withSharedModule(env: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
  const shared = sharedBaselineDir();
  if (shared === undefined) return env;
  const path = [shared, env.PYTHONPATH].filter((part) => part !== undefined && part !== '').join(delimiter);
  return { ...env, PYTHONPATH: path };
}

/** What a script writes to its output file: `available: false` says why it measured nothing. */
export interface PythonScriptOutput {
  readonly available: boolean;
  readonly reason?: string;
}

export type PythonScriptOutcome<T extends PythonScriptOutput> =
  | { readonly status: 'ok'; readonly output: T }
  | { readonly status: 'unavailable'; readonly reason: string };

export interface PythonScriptRun {
  /** The script's path. */
  readonly script: string;
  /** Its arguments after the path. */
  readonly args: readonly string[];
  /** The JSON file the script writes. */
  readonly outFile: string;
  /** How the script is named in reasons ("the baseline script"). */
  readonly label: string;
  /** The interpreter (default: `$PYTHON`, else `python3`). */
  readonly python?: string;
  readonly env?: NodeJS.ProcessEnv;
  /** Also pass the script's stdout to `onOutput` (its stderr always goes there). */
  readonly forwardStdout?: boolean;
  readonly onOutput?: (text: string) => void;
}

function lastLine(text: string): string {
  return (
    text
      .trim()
      .split('\n')
      .filter((l) => l.trim() !== '')
      .at(-1) ?? ''
  );
}

/**
 * Runs a Python script (a PyTorch baseline) as a child process, with the
 * shared helpers importable, and reads the JSON it writes. Never throws for a missing Python, a failing script or a
 * script that could not measure: the outcome says why.
 */
export async function runPythonScript<T extends PythonScriptOutput>(
  run: PythonScriptRun,
): Promise<PythonScriptOutcome<T>> {
  const env = run.env ?? process.env;
  const python = run.python ?? env.PYTHON ?? 'python3';
  const exit = await new Promise<{ code: number | null; error?: Error; stderr: string }>((resolve) => {
    let stderr = '';
    const child = spawn(python, [run.script, ...run.args], {
      stdio: ['ignore', run.forwardStdout ? 'pipe' : 'ignore', 'pipe'],
      env: { ...withSharedModule(env), PYTHONUNBUFFERED: '1' },
    });
    child.stdout?.on('data', (chunk: Buffer) => run.onOutput?.(chunk.toString()));
    child.stderr?.on('data', (chunk: Buffer) => {
      const text = chunk.toString();
      stderr = (stderr + text).slice(-4000);
      run.onOutput?.(text);
    });
    child.on('error', (error) => resolve({ code: null, error, stderr }));
    child.on('close', (code) => resolve({ code, stderr }));
  });
  if (exit.error) {
    const missing = (exit.error as NodeJS.ErrnoException).code === 'ENOENT';
    return {
      status: 'unavailable',
      reason: missing
        ? `${python} was not found (set $PYTHON to a Python with PyTorch)`
        : `${python} could not be started: ${exit.error.message}`,
    };
  }
  if (exit.code !== 0) {
    const why = lastLine(exit.stderr);
    return {
      status: 'unavailable',
      reason: `${run.label} exited with code ${exit.code}${why ? `: ${why}` : ''}`,
    };
  }
  let output: T;
  try {
    output = JSON.parse(await readFile(run.outFile, 'utf8')) as T;
  } catch (error) {
    return { status: 'unavailable', reason: `no baseline output: ${(error as Error).message}` };
  }
  if (!output.available)
    return { status: 'unavailable', reason: output.reason ?? 'the baseline could not run' };
  return { status: 'ok', output };
}
