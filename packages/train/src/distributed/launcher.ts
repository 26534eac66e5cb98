import { type ChildProcess, spawn } from 'node:child_process';
import { createServer } from 'node:net';
import { CollectiveError, InvalidArgumentError } from '@rayo/core';
import { RANK_ENV } from './rendezvous.js';

export interface LaunchOptions {
  /** How many ranks (GPUs 0 … n−1), or the GPU of each rank. */
  readonly gpus: number | readonly number[];
  /** The program every rank runs. */
  readonly script: string;
  readonly args?: readonly string[];
  /** Options for Node itself, before the script. */
  readonly nodeArgs?: readonly string[];
  /** Added to every rank's environment. */
  readonly env?: Readonly<Record<string, string>>;
  /** Rank 0's rendezvous port; by default a free one. */
  readonly masterPort?: number;
  /** After a rank fails, how long the others get after SIGTERM before SIGKILL; default 10 s. */
  readonly graceMs?: number;
  /**
   * Whether a failed rank makes the launcher stop the others (default true);
   * false leaves them to notice it themselves, as a check of their watchdog does.
   */
  readonly stopOthersOnFailure?: boolean;
  /** The ranks' output: shown (default) or collected into the result. */
  readonly output?: 'inherit' | 'collect';
}

export interface RankExit {
  readonly rank: number;
  readonly code: number | null;
  readonly signal: NodeJS.Signals | null;
  /** When the process ended (milliseconds since the epoch). */
  readonly endedAt: number;
  /** stdout and stderr, when collected. */
  readonly stdout: string;
  readonly stderr: string;
}

async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return typeof address === 'object' && address ? address.port : 0;
}

function gpuList(gpus: LaunchOptions['gpus']): readonly number[] {
  const list = typeof gpus === 'number' ? Array.from({ length: gpus }, (_, i) => i) : gpus;
  if (list.length < 1 || list.some((g) => !Number.isInteger(g) || g < 0)) {
    throw new InvalidArgumentError('gpus must be a positive count or a list of GPU ordinals', {
      operation: 'launchDataParallel',
      argument: 'gpus',
      expected: 'a count ≥ 1 or ordinals ≥ 0',
      actual: JSON.stringify(gpus),
    });
  }
  return list;
}

/**
 * Starts one Node process per GPU on this host, each seeing only its GPU
 * (CUDA_VISIBLE_DEVICES) and told its place by RANK, WORLD_SIZE,
 * LOCAL_RANK, MASTER_ADDR and MASTER_PORT (see `joinRendezvous`). When a
 * rank fails, the others get SIGTERM (which aborts their communicators) and
 * SIGKILL after the grace time, so that no rank waits for a dead one. Resolves
 * with every rank's exit once all have ended; rejects with a LaunchError
 * naming the first rank that failed.
 */
export async function launchDataParallel(options: LaunchOptions): Promise<RankExit[]> {
  const gpus = gpuList(options.gpus);
  const masterPort = options.masterPort ?? (await freePort());
  const collect = options.output === 'collect';
  const children: ChildProcess[] = [];
  let firstFailure: RankExit | undefined;
  const exits = await Promise.all(
    gpus.map(
      (gpu, rank) =>
        new Promise<RankExit>((resolve) => {
          const child = spawn(
            process.execPath,
            [...(options.nodeArgs ?? []), options.script, ...(options.args ?? [])],
            {
              env: {
                ...process.env,
                ...options.env,
                CUDA_VISIBLE_DEVICES: String(gpu),
                [RANK_ENV.rank]: String(rank),
                [RANK_ENV.size]: String(gpus.length),
                [RANK_ENV.localRank]: String(rank),
                [RANK_ENV.masterAddr]: '127.0.0.1',
                [RANK_ENV.masterPort]: String(masterPort),
              },
              stdio: collect ? ['ignore', 'pipe', 'pipe'] : 'inherit',
            },
          );
          children.push(child);
          let stdout = '';
          let stderr = '';
          child.stdout?.on('data', (d: Buffer) => {
            stdout += d.toString();
          });
          child.stderr?.on('data', (d: Buffer) => {
            stderr += d.toString();
          });
          child.on('error', (error) => {
            stderr += String(error);
          });
          child.on('close', (code, signal) => {
            const exit = { rank, code, signal, endedAt: Date.now(), stdout, stderr };
            if ((code !== 0 || signal !== null) && firstFailure === undefined) {
              firstFailure = exit;
              if (options.stopOthersOnFailure ?? true) stopOthers(children, child, options.graceMs ?? 10_000);
            }
            resolve(exit);
          });
        }),
    ),
  );
  if (firstFailure) throw new LaunchError(firstFailure, exits);
  return exits;
}

/** A rank failed: the message names it and ends with its last lines of stderr; `exits` has every rank's. */
export class LaunchError extends CollectiveError {
  constructor(
    failed: RankExit,
    readonly exits: readonly RankExit[],
  ) {
    const how = failed.signal ? `was killed by ${failed.signal}` : `exited with code ${failed.code}`;
    const tail = failed.stderr.trim().split('\n').slice(-5).join('\n');
    super(`rank ${failed.rank} of ${exits.length} ${how}${tail ? `:\n${tail}` : ''}`, {
      operation: 'launchDataParallel',
    });
  }
}

function stopOthers(children: readonly ChildProcess[], failed: ChildProcess, graceMs: number): void {
  for (const child of children) {
    if (child === failed || child.exitCode !== null || child.signalCode !== null) continue;
    child.kill('SIGTERM');
    setTimeout(() => {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    }, graceMs).unref();
  }
}
