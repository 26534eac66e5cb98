import { spawnSync } from 'node:child_process';
import { accessSync, constants, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { delimiter, join } from 'node:path';
import { BackendUnavailableError, KernelCompileError } from '@rayo/core';
import { describeValue, misuse } from './errors.js';

/**
 * `ptxas`, NVIDIA's PTX assembler, checks generated PTX without a GPU: tests
 * assemble every kernel family with it. It is found on PATH, then under
 * `$CUDA_HOME/bin` and `$CUDA_PATH/bin`.
 */

export type PtxasStatus =
  | { readonly available: true; readonly path: string; readonly version: string }
  | { readonly available: false; readonly reason: string };

export interface PtxasResult {
  /** Whether ptxas exited with status 0. */
  readonly ok: boolean;
  readonly exitCode: number | null;
  /** ptxas's stdout and stderr together: errors, warnings and, with `verbose`, resource usage. */
  readonly log: string;
  readonly arch: string;
}

export interface AssembleOptions {
  /** The ptxas binary; found with `findPtxas()` when omitted. */
  readonly ptxas?: string;
  /** Print register, shared-memory and spill usage into the log (`-v`). */
  readonly verbose?: boolean;
  /** Further ptxas arguments, e.g. `['-O3']`. */
  readonly args?: readonly string[];
}

type Env = Readonly<Record<string, string | undefined>>;

const EXE = process.platform === 'win32' ? 'ptxas.exe' : 'ptxas';
const ARCH = /^(sm|compute)_\d+[af]?$/;
const TIMEOUT_MS = 120_000;
const cache = new Map<string, PtxasStatus>();

function executable(path: string): boolean {
  try {
    accessSync(path, constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

function candidates(env: Env): string[] {
  const dirs = (env.PATH ?? '').split(delimiter).filter((d) => d !== '');
  for (const root of [env.CUDA_HOME, env.CUDA_PATH]) if (root) dirs.push(join(root, 'bin'));
  return dirs.map((d) => join(d, EXE));
}

/** Locates a working ptxas and reads its version; the result is cached per environment. */
export function findPtxas(env: Env = process.env): PtxasStatus {
  const key = [env.PATH, env.CUDA_HOME, env.CUDA_PATH].join('\0');
  const cached = cache.get(key);
  if (cached) return cached;
  const searched = candidates(env);
  const path = searched.find(executable);
  let status: PtxasStatus;
  if (path === undefined) {
    status = {
      available: false,
      reason: 'ptxas not found on PATH, under $CUDA_HOME/bin or $CUDA_PATH/bin (install the CUDA toolkit)',
    };
  } else {
    const run = spawnSync(path, ['--version'], { encoding: 'utf8', timeout: TIMEOUT_MS });
    const out = `${run.stdout ?? ''}${run.stderr ?? ''}`;
    if (run.status !== 0) {
      status = {
        available: false,
        reason: `${path} --version failed: ${run.error?.message ?? out.trim()}`,
      };
    } else {
      const version = /release ([\d.]+)/.exec(out)?.[1] ?? out.trim().split('\n').at(-1) ?? 'unknown';
      status = { available: true, path, version };
    }
  }
  cache.set(key, status);
  return status;
}

/**
 * Assembles `ptx` for `arch` (e.g. `sm_90`) and returns the log. The PTX is
 * written to a temporary file, as ptxas reads files, and removed afterwards.
 */
export function assemblePtx(ptx: string, arch: string, options: AssembleOptions = {}): PtxasResult {
  if (typeof arch !== 'string' || !ARCH.test(arch)) {
    throw misuse('assemblePtx', 'invalid architecture', {
      argument: 'arch',
      expected: 'sm_XX or compute_XX, e.g. sm_90',
      actual: describeValue(arch),
    });
  }
  let ptxas = options.ptxas;
  if (ptxas === undefined) {
    const status = findPtxas();
    if (!status.available) throw new BackendUnavailableError(status.reason, { operation: 'assemblePtx' });
    ptxas = status.path;
  }
  const dir = mkdtempSync(join(tmpdir(), 'rayo-ptxas-'));
  try {
    const input = join(dir, 'module.ptx');
    writeFileSync(input, ptx);
    const args = [
      `-arch=${arch}`,
      ...(options.verbose ? ['-v'] : []),
      ...(options.args ?? []),
      '-o',
      join(dir, 'module.cubin'),
      input,
    ];
    const run = spawnSync(ptxas, args, { encoding: 'utf8', timeout: TIMEOUT_MS });
    if (run.error) {
      throw new BackendUnavailableError(`could not run ${ptxas}: ${run.error.message}`, {
        operation: 'assemblePtx',
        cause: run.error,
      });
    }
    // ptxas names the temporary file in its messages; the caller knows no such file.
    const log = `${run.stdout}${run.stderr}`.split(input).join('<ptx>');
    return { ok: run.status === 0, exitCode: run.status, log, arch };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** Like `assemblePtx`, but a failure throws a KernelCompileError carrying the log. */
export function assemblePtxOrThrow(
  ptx: string,
  arch: string,
  options: AssembleOptions & { readonly kernel?: string } = {},
): PtxasResult {
  const result = assemblePtx(ptx, arch, options);
  if (!result.ok) {
    throw new KernelCompileError(`ptxas -arch=${arch} failed (exit ${result.exitCode})`, result.log, {
      operation: options.kernel ?? 'assemblePtx',
    });
  }
  return result;
}

/** How tests treat ptxas on this machine. */
export interface PtxasTestGate {
  readonly status: PtxasStatus;
  /** Under `CI=true` ptxas must exist: its absence fails the tests instead of skipping them. */
  readonly required: boolean;
  /** Skip the ptxas tests: ptxas is missing and not required. */
  readonly skip: boolean;
  /** Why the tests are skipped (or will fail), or what runs them. */
  readonly reason: string;
}

export function ptxasTestGate(env: Env = process.env): PtxasTestGate {
  const status = findPtxas(env);
  const required = env.CI === 'true' || env.CI === '1';
  if (status.available) {
    return { status, required, skip: false, reason: `ptxas ${status.version} at ${status.path}` };
  }
  return { status, required, skip: !required, reason: status.reason };
}
