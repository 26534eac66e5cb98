import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { RENDEZVOUS_RANK_PROGRAM } from '@rayo/train-testkit';
import { build } from 'esbuild';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { launchCli } from './launchCli.js';
import { LaunchError, launchDataParallel, type RankExit } from './launcher.js';

// Ranks are separate Node processes, so the TypeScript program is bundled first.
let dir: string;
let script: string;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'rayo-rendezvous-'));
  script = join(dir, 'rank.mjs');
  await build({
    entryPoints: [RENDEZVOUS_RANK_PROGRAM],
    outfile: script,
    bundle: true,
    platform: 'node',
    format: 'esm',
    target: 'node20',
    conditions: ['@rayo/source'],
    logLevel: 'error',
  });
});

afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

const report = (exit: RankExit) =>
  JSON.parse(exit.stdout.trim()) as { rank: number; size: number; gpu: string; seen: number[] };

describe('launchDataParallel and the TCP rendezvous store, across processes', () => {
  it('starts a process per GPU that find each other through rank 0’s store on 127.0.0.1', async () => {
    const exits = await launchDataParallel({ gpus: [3, 5, 6], script, output: 'collect' });
    expect(exits.map((e) => e.code)).toEqual([0, 0, 0]);
    const [r0, r1, r2] = exits.map(report);
    expect(r0).toEqual({ rank: 0, size: 3, gpu: '3', seen: [71, 81, 91, 72, 82, 92] });
    expect(r1).toEqual({ rank: 1, size: 3, gpu: '5', seen: [7, 8, 9] });
    expect(r2!.gpu).toBe('6');
  }, 30_000);

  it('stops the other ranks when one fails, and names the failed rank', async () => {
    const run = launchDataParallel({ gpus: 2, script, args: ['fail'], output: 'collect', graceMs: 2_000 });
    const error = (await run.catch((e: unknown) => e)) as LaunchError;
    expect(error).toBeInstanceOf(LaunchError);
    expect(error.message).toMatch(/launchDataParallel: rank 1 of 2 exited with code 3/);
    // Rank 0 was waiting for rank 1's answer; it is ended by the launcher, not by its own 20 s timeout.
    expect(error.exits[0]!.signal).toBe('SIGTERM');
  }, 30_000);
});

describe('watchPeers', () => {
  it('ends the other ranks at once when a rank is killed, naming it, without the launcher’s help', async () => {
    const run = launchDataParallel({
      gpus: 3,
      script,
      args: ['die'],
      output: 'collect',
      stopOthersOnFailure: false,
    });
    const error = (await run.catch((e: unknown) => e)) as LaunchError;
    expect(error).toBeInstanceOf(LaunchError);
    expect(error.exits[1]!.signal).toBe('SIGKILL');
    // Ranks 0 and 2 waited on a key nobody sets (20 s timeout): the lost peer ended the wait.
    for (const r of [0, 2]) {
      expect(error.exits[r]!.code, error.exits[r]!.stderr).toBe(4);
      expect(error.exits[r]!.stderr).toMatch(
        new RegExp(
          `rank ${r} of 3: rank 1 ended before leaving the rendezvous .*communicator aborted: rank 1 is gone`,
        ),
      );
    }
  }, 30_000);
});

describe('launchCli', () => {
  it('refuses unknown options and a missing script with its usage', async () => {
    const errors: string[] = [];
    const original = console.error;
    console.error = (text: string) => errors.push(text);
    try {
      expect(await launchCli(['--gpu', '2', 'x.mjs'])).toBe(2);
      expect(await launchCli(['--gpus', '2'])).toBe(2);
    } finally {
      console.error = original;
    }
    expect(errors[0]).toMatch(/unknown option --gpu/);
    expect(errors[1]).toMatch(/^Usage: launch --gpus/);
  });

  it('runs a script on the GPUs of a list and reports a failed rank with exit code 1', async () => {
    expect(await launchCli(['--gpus', '1,2', script])).toBe(0);
    const errors: string[] = [];
    const original = console.error;
    console.error = (text: string) => errors.push(text);
    try {
      expect(await launchCli(['--gpus', '2', script, 'fail'])).toBe(1);
    } finally {
      console.error = original;
    }
    expect(errors.join('\n')).toMatch(/rank 1 of 2 exited with code 3/);
  }, 30_000);
});
