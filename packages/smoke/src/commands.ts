import { spawn } from 'node:child_process';

export interface CommandResult {
  readonly code: number | null;
  readonly stdout: string;
  readonly stderr: string;
}

/**
 * This process's environment without the `npm_*` variables a parent package
 * manager sets (under `pnpm test`, `npm_config_user_agent` names pnpm):
 * npm reads them as its own configuration, so a child npm would take itself
 * for pnpm.
 */
export function withoutPackageManagerEnvironment(): NodeJS.ProcessEnv {
  return Object.fromEntries(
    Object.entries(process.env).filter(([key]) => !key.toLowerCase().startsWith('npm_')),
  );
}

/** Runs a program (no shell) and collects what it prints; never rejects on a failing exit. */
export function run(
  program: string,
  args: readonly string[],
  options: { readonly cwd: string; readonly env?: NodeJS.ProcessEnv },
): Promise<CommandResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(program, args, { cwd: options.cwd, env: options.env ?? process.env });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk: Buffer) => {
      stdout += chunk;
    });
    child.stderr.on('data', (chunk: Buffer) => {
      stderr += chunk;
    });
    child.once('error', reject);
    child.once('close', (code) => resolve({ code, stdout, stderr }));
  });
}

/** Runs a program and rejects, with everything it printed, unless it exits 0. */
export async function runOk(
  program: string,
  args: readonly string[],
  options: { readonly cwd: string; readonly env?: NodeJS.ProcessEnv },
): Promise<CommandResult> {
  const result = await run(program, args, options);
  if (result.code !== 0) {
    throw new Error(
      `\`${program} ${args.join(' ')}\` in ${options.cwd} exited with ${result.code}\n${result.stdout}\n${result.stderr}`,
    );
  }
  return result;
}

/** The last line of a program's output that parses as JSON. */
export function lastJsonLine(output: string): Record<string, unknown> {
  const lines = output.trim().split('\n').reverse();
  for (const line of lines) {
    try {
      return JSON.parse(line) as Record<string, unknown>;
    } catch {
      // Not the line we want (a warning from Dawn, say).
    }
  }
  throw new Error(`no JSON line in:\n${output}`);
}
