import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { dirname, join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { CollectiveError, InvalidArgumentError } from '@rayo/core';
import { LaunchError, launchDataParallel, type RankExit } from '@rayo/train';
import { summariseTimes, THROUGHPUT_ADAMW } from '../train/throughput.js';
import { QUICK_WORKLOADS, THROUGHPUT_WORKLOADS } from '../train/trainBench.js';
import type { TransformerWorkloadSpec } from '../train/workload.js';
import { type DataParallelRequest, type DataParallelRun, DP_REQUEST_SCHEMA } from './dataParallelWorker.js';

export const USAGE = `Usage: dp-bench [options]

Trains train-bench's GPT-style causal LM with data parallelism over NCCL on 1
GPU and on N GPUs at the same global batch, checks that the losses agree step
by step, and reports the tokens per second of each and the scaling; with
--baseline torch also PyTorch DDP on the same GPUs; with --fault, kills rank 1
mid-run and checks that rank 0 exits with a clear error within 30 s.

  --gpus N           GPUs of the parallel run (default 2)
  --batch N          global batch in sequences (default 16; quick 4)
  --warmup N         untimed steps (default 3)
  --steps N          timed steps (default 20; quick 3)
  --seed N           initialisation and data (default 0)
  --mode MODE        replayed: the step recorded once as CUDA graphs
                     (default); eager: recorded anew every step
  --overlap WHEN     on: all-reduce each gradient bucket as soon as backward
                     finishes it, overlapped with the rest of backward
                     (default); off: all of them after backward; both: the
                     N-GPU run once with each, on then off (an A/B)
  --bucket-mb N      MiB of gradients per all-reduce bucket (default 25, as
                     PyTorch DDP's bucket_cap_mb)
  --zero WHEN        on: shard AdamW across the N GPUs (ZeRO stage 1:
                     gradients reduce-scattered, each rank updates its share,
                     parameters all-gathered; PyTorch: ZeroRedundancyOptimizer);
                     off: every rank updates everything (default); both: the
                     N-GPU run once with each, as listed (on,off also works)
  --precision P      f32 (default) or bf16: the products in bf16, f32 master
                     weights and AdamW (PyTorch: bf16 autocast)
  --quick            the tiny transformer of train-bench's quick mode
  --baseline NAME    torch: also run torch_ddp_baseline.py ($PYTHON, else python3); none (default)
  --torch-compile    with --baseline torch: also run it with the DDP model under
                     torch.compile, on 1 and N GPUs and with the other --zero
                     setting (the stronger baseline: eager DDP at this size
                     waits on the host)
  --fault            also run the killed-rank check
  --out DIR          request.json and report.json (default dp-bench-results)
`;

/**
 * Relative difference of the 1-GPU and N-GPU losses above which the check
 * fails: f32 sums in another order. bf16 products round each operand to 8
 * bits of mantissa, and the run memorises one batch down to losses near
 * 0.002, where those roundings move the curve by up to about 1.4% (H200).
 */
export const LOSS_TOLERANCE = { f32: 5e-3, bf16: 3e-2 } as const;
const FAULT_LIMIT_MS = 30_000;

/** The largest relative difference between two loss curves. */
export function maxRelativeDifference(a: readonly number[], b: readonly number[]): number {
  if (a.length !== b.length) return Number.POSITIVE_INFINITY;
  return a.reduce((worst, x, i) => Math.max(worst, Math.abs(x - b[i]!) / Math.max(Math.abs(x), 1e-6)), 0);
}

/** Tokens per second at the median step time of a run of `tokensPerStep`. */
export function tokensPerSecond(times: readonly number[], tokensPerStep: number): number {
  return (1000 * tokensPerStep) / summariseTimes(times).medianMs;
}

function lastJsonLine<T>(text: string, what: string): T {
  const line = text.trim().split('\n').at(-1);
  try {
    return JSON.parse(line ?? '') as T;
  } catch {
    throw new CollectiveError(`${what} printed no result`, {
      operation: 'dp-bench',
      actual: line ?? '(nothing)',
    });
  }
}

async function runRayo(script: string, requestPath: string, world: number): Promise<DataParallelRun> {
  process.stderr.write(`rayo on ${world} GPU(s) ... `);
  let exits: RankExit[];
  try {
    exits = await launchDataParallel({
      gpus: world,
      script,
      args: ['--worker', requestPath],
      output: 'collect',
    });
  } catch (error) {
    process.stderr.write('failed\n');
    throw error;
  }
  const run = lastJsonLine<DataParallelRun>(exits[0]!.stdout, 'rank 0');
  process.stderr.write(`${tokensPerSecond(run.times, 1).toFixed(3)} steps/s\n`);
  return run;
}

/** What the PyTorch baseline reports of a run (its peaks by rank), or why it has none. */
interface TorchResult {
  readonly tokensPerSecond?: number;
  readonly medianMs?: number;
  readonly peakBytes?: readonly number[];
  readonly error?: string;
}

function torchLine(result: TorchResult): string {
  if (result.tokensPerSecond === undefined) return result.error ?? 'no result';
  const peaks = result.peakBytes ? `, peak ${mibList(result.peakBytes)}` : '';
  return `${result.tokensPerSecond.toFixed(0)} tokens/s (step ${result.medianMs?.toFixed(1) ?? '-'} ms${peaks})`;
}

function mib(bytes: number): string {
  return `${(bytes / 2 ** 20).toFixed(0)} MiB`;
}

/** Bytes by rank, in MiB: `[812, 809] MiB`. */
export function mibList(bytes: readonly number[]): string {
  return `[${bytes.map((b) => (b / 2 ** 20).toFixed(0)).join(', ')}] MiB`;
}

/** Runs torch_ddp_baseline.py ($PYTHON, else python3) on `world` GPUs, under torch.compile with `compile`. */
export function runTorch(
  requestPath: string,
  world: number,
  out: string,
  compile = false,
): Promise<TorchResult> {
  const beside = join(dirname(process.argv[1] ?? '.'), 'torch_ddp_baseline.py');
  const script = existsSync(beside) ? beside : resolve('packages/workloads/baseline/torch_ddp_baseline.py');
  const python = process.env.PYTHON || 'python3';
  process.stderr.write(`PyTorch DDP on ${world} GPU(s)${compile ? ' under torch.compile' : ''} ...\n`);
  const args = [script, '--request', requestPath, '--gpus', String(world), '--out', out];
  return new Promise((done) => {
    const child = spawn(python, compile ? [...args, '--compile'] : args, {
      stdio: ['ignore', 'ignore', 'inherit'],
    });
    child.on('error', (error) => done({ error: error.message }));
    child.on('close', async (code) => {
      if (code !== 0) return done({ error: `${python} exited with code ${code}` });
      const result = JSON.parse(await readFile(out, 'utf8')) as TorchResult & { reason?: string };
      done(result.tokensPerSecond === undefined ? { error: result.reason ?? 'no result' } : result);
    });
  });
}

/** Kills rank 1 at a step and measures how long rank 0 takes to end, and with what. */
async function runFault(script: string, request: DataParallelRequest, out: string, world: number) {
  const path = join(out, 'fault-request.json');
  const killAtStep = Math.min(2, request.warmup + request.steps - 1);
  await writeFile(path, JSON.stringify({ ...request, killRank: 1, killAtStep, timeoutMs: 25_000 }));
  process.stderr.write(`fault check: rank 1 of ${world} killed at step ${killAtStep} ... `);
  const started = Date.now();
  const exits = await launchDataParallel({
    gpus: world,
    script,
    args: ['--worker', path],
    output: 'collect',
    stopOthersOnFailure: false,
  }).catch((error: unknown) => {
    if (error instanceof LaunchError) return error.exits;
    throw error;
  });
  const killed = exits[1];
  const survivor = exits[0];
  const afterKillMs = killed && survivor ? survivor.endedAt - killed.endedAt : Number.NaN;
  const message = survivor?.stderr.trim().split('\n').at(-1) ?? '';
  const passed =
    survivor !== undefined && survivor.code !== 0 && afterKillMs <= FAULT_LIMIT_MS && /rank 0/.test(message);
  process.stderr.write(
    `${passed ? 'ok' : 'FAILED'}: rank 0 ended ${(afterKillMs / 1000).toFixed(1)} s after the kill\n`,
  );
  return {
    passed,
    afterKillMs,
    rank0Code: survivor?.code ?? null,
    rank0Message: message,
    totalMs: Date.now() - started,
  };
}

export async function main(argv: readonly string[]): Promise<number> {
  if (argv[0] === '--worker') {
    const { runDataParallelWorker } = await import('./dataParallelWorker.js');
    await runDataParallelWorker(argv[1]!);
    return 0;
  }
  const { values } = parseArgs({
    args: [...argv],
    options: {
      gpus: { type: 'string', default: '2' },
      batch: { type: 'string' },
      warmup: { type: 'string', default: '3' },
      steps: { type: 'string' },
      seed: { type: 'string', default: '0' },
      mode: { type: 'string', default: 'replayed' },
      overlap: { type: 'string', default: 'on' },
      'bucket-mb': { type: 'string' },
      zero: { type: 'string', default: 'off' },
      precision: { type: 'string', default: 'f32' },
      quick: { type: 'boolean', default: false },
      baseline: { type: 'string', default: 'none' },
      'torch-compile': { type: 'boolean', default: false },
      fault: { type: 'boolean', default: false },
      out: { type: 'string', default: 'dp-bench-results' },
      help: { type: 'boolean', short: 'h' },
    },
  });
  if (values.help) {
    process.stdout.write(USAGE);
    return 0;
  }
  const overlaps = overlapSettings(values.overlap!);
  const zeros = zeroSettings(values.zero!);
  const model = (values.quick ? QUICK_WORKLOADS[2] : THROUGHPUT_WORKLOADS[3]) as TransformerWorkloadSpec;
  const spec: TransformerWorkloadSpec = {
    ...model,
    batch: Number(values.batch ?? (values.quick ? 4 : 16)),
    precision: precisionOf(values.precision!),
  };
  const gpus = Number(values.gpus);
  const request: DataParallelRequest = {
    schema: DP_REQUEST_SCHEMA,
    spec,
    seed: Number(values.seed),
    warmup: Number(values.warmup),
    steps: Number(values.steps ?? (values.quick ? 3 : 20)),
    clipNorm: 1,
    adamw: THROUGHPUT_ADAMW,
    mode: values.mode === 'eager' ? 'eager' : 'replayed',
    overlap: overlaps[0] === 'on',
    zero: zeros[0] === 'on',
    ...(values['bucket-mb'] === undefined ? {} : { bucketBytes: bucketBytesOf(values['bucket-mb']) }),
  };
  const out = resolve(values.out);
  await mkdir(out, { recursive: true });
  const requestPath = join(out, 'request.json');
  await writeFile(requestPath, `${JSON.stringify(request, null, 2)}\n`);
  const script = resolve(process.argv[1]!);

  const single = await runRayo(script, requestPath, 1);
  const parallel = await runRayo(script, requestPath, gpus);
  // The A/Bs: the same run with the other setting, right after on the same GPUs.
  const other =
    overlaps.length > 1
      ? await runRayo(script, await requestWith(out, request, { overlap: false }), gpus)
      : undefined;
  const zeroPath =
    zeros.length > 1 ? await requestWith(out, request, { zero: zeros[1] === 'on' }) : undefined;
  const zeroOther = zeroPath ? await runRayo(script, zeroPath, gpus) : undefined;
  const tokens = spec.seq * spec.batch;
  const lossDifference = maxRelativeDifference(single.losses, parallel.losses);
  const rayo = {
    single: tokensPerSecond(single.times, tokens),
    parallel: tokensPerSecond(parallel.times, tokens),
  };
  const torch =
    values.baseline === 'torch'
      ? {
          single: await runTorch(requestPath, 1, join(out, 'torch-1.json')),
          parallel: await runTorch(requestPath, gpus, join(out, `torch-${gpus}.json`)),
          zeroOther: zeroPath
            ? await runTorch(zeroPath, gpus, join(out, `torch-${gpus}-zero-${zeros[1]}.json`))
            : undefined,
        }
      : undefined;
  const torchCompiled =
    values.baseline === 'torch' && values['torch-compile']
      ? {
          single: await runTorch(requestPath, 1, join(out, 'torch-compile-1.json'), true),
          parallel: await runTorch(requestPath, gpus, join(out, `torch-compile-${gpus}.json`), true),
          // The other ZeRO setting too: plain DDP is PyTorch's stronger form where ZeRO comes first.
          zeroOther: zeroPath
            ? await runTorch(zeroPath, gpus, join(out, `torch-compile-${gpus}-zero-${zeros[1]}.json`), true)
            : undefined,
        }
      : undefined;
  const fault = values.fault ? await runFault(script, request, out, gpus) : undefined;
  const report = {
    device: parallel.device,
    gpus,
    spec,
    steps: request.steps,
    losses: { single: single.losses, parallel: parallel.losses, maxRelativeDifference: lossDifference },
    tokensPerSecond: rayo,
    scaling: rayo.parallel / rayo.single,
    stepMs: {
      single: summariseTimes(single.times).medianMs,
      parallel: summariseTimes(parallel.times).medianMs,
    },
    allReduce: parallel.allReduce,
    precision: spec.precision,
    zero: zeros[0],
    // Peak allocated device bytes of each rank, and rank 0's optimizer tensors.
    memory: {
      single: { peakBytes: single.peakBytes, optimizerBytes: single.optimizerBytes },
      parallel: { peakBytes: parallel.peakBytes, optimizerBytes: parallel.optimizerBytes },
    },
    zeroOther: zeroOther && {
      zero: zeros[1],
      stepMs: summariseTimes(zeroOther.times).medianMs,
      tokensPerSecond: tokensPerSecond(zeroOther.times, tokens),
      scaling: tokensPerSecond(zeroOther.times, tokens) / rayo.single,
      peakBytes: zeroOther.peakBytes,
      optimizerBytes: zeroOther.optimizerBytes,
      maxRelativeDifference: maxRelativeDifference(single.losses, zeroOther.losses),
    },
    overlap: overlaps[0],
    segments: parallel.segments,
    overlapOff: other && {
      stepMs: summariseTimes(other.times).medianMs,
      tokensPerSecond: tokensPerSecond(other.times, tokens),
      segments: other.segments,
      // The same collectives, only at other times: the same bits where the kernels are deterministic.
      identicalLosses: other.losses.every((l, i) => l === parallel.losses[i]),
      maxRelativeDifference: maxRelativeDifference(other.losses, parallel.losses),
    },
    torch,
    vsTorchDdp: torch?.parallel.tokensPerSecond ? rayo.parallel / torch.parallel.tokensPerSecond : undefined,
    torchCompiled,
    vsTorchDdpCompiled: torchCompiled?.parallel.tokensPerSecond
      ? rayo.parallel / torchCompiled.parallel.tokensPerSecond
      : undefined,
    fault,
  };
  await writeFile(join(out, 'report.json'), `${JSON.stringify(report, null, 2)}\n`);
  const tolerance = LOSS_TOLERANCE[spec.precision === 'bf16' ? 'bf16' : 'f32'];
  const lossesAgree = lossDifference <= tolerance;
  console.log(
    [
      `device: ${report.device}, global batch ${spec.batch} × ${spec.seq} tokens`,
      `losses 1 vs ${gpus} GPUs: max relative difference ${lossDifference.toExponential(2)} (${lossesAgree ? 'ok' : 'MISMATCH'}, tolerance ${tolerance})`,
      `rayo (${spec.precision}, zero ${report.zero}, all-reduce overlap ${report.overlap}${report.segments ? `, backward in ${report.segments} graphs` : ''}): ${rayo.single.toFixed(0)} tokens/s on 1 GPU, ${rayo.parallel.toFixed(0)} on ${gpus}: scaling ${report.scaling.toFixed(2)}× (steps ${report.stepMs.single.toFixed(1)} / ${report.stepMs.parallel.toFixed(1)} ms)`,
      `memory (peak allocated per rank; optimizer tensors of rank 0): 1 GPU ${mibList(single.peakBytes)} (${mib(single.optimizerBytes)}), ${gpus} GPUs zero ${report.zero} ${mibList(parallel.peakBytes)} (${mib(parallel.optimizerBytes)})`,
      report.zeroOther
        ? `zero ${report.zeroOther.zero}: ${report.zeroOther.tokensPerSecond.toFixed(0)} tokens/s on ${gpus}: scaling ${report.zeroOther.scaling.toFixed(2)}× (step ${report.zeroOther.stepMs.toFixed(1)} ms), peak ${mibList(report.zeroOther.peakBytes)} (${mib(report.zeroOther.optimizerBytes)}); losses vs 1 GPU ${report.zeroOther.maxRelativeDifference.toExponential(2)}`
        : '',
      report.overlapOff
        ? `overlap off: ${report.overlapOff.tokensPerSecond.toFixed(0)} tokens/s on ${gpus} (step ${report.overlapOff.stepMs.toFixed(1)} ms); losses ${report.overlapOff.identicalLosses ? 'identical' : `differ by up to ${report.overlapOff.maxRelativeDifference.toExponential(2)}`} to overlap on`
        : '',
      parallel.allReduce
        ? `all-reduce of the ${(parallel.allReduce.bytes / 2 ** 20).toFixed(0)} MiB of gradients alone: ${parallel.allReduce.ms.toFixed(2)} ms (${(parallel.allReduce.bytes / parallel.allReduce.ms / 1e6).toFixed(0)} GB/s); as one flat tensor a bucket ${parallel.allReduce.flatMs.toFixed(2)} ms`
        : '',
      torch
        ? `PyTorch DDP: 1 GPU ${torchLine(torch.single)}, ${gpus} GPUs zero ${report.zero} ${torchLine(torch.parallel)}; rayo/DDP ${report.vsTorchDdp?.toFixed(2) ?? '-'}×`
        : '',
      torch?.zeroOther ? `PyTorch DDP zero ${zeros[1]}: ${gpus} GPUs ${torchLine(torch.zeroOther)}` : '',
      torchCompiled
        ? `PyTorch DDP under torch.compile: 1 GPU ${torchLine(torchCompiled.single)}, ${gpus} GPUs zero ${report.zero} ${torchLine(torchCompiled.parallel)}; rayo/compiled DDP ${report.vsTorchDdpCompiled?.toFixed(2) ?? '-'}×`
        : '',
      torchCompiled?.zeroOther
        ? `PyTorch DDP under torch.compile, zero ${zeros[1]}: ${gpus} GPUs ${torchLine(torchCompiled.zeroOther)}`
        : '',
      fault
        ? `fault: ${fault.passed ? 'ok' : 'FAILED'}, rank 0 ended ${(fault.afterKillMs / 1000).toFixed(1)} s after the kill: ${fault.rank0Message}`
        : '',
      `report: ${join(out, 'report.json')}`,
    ]
      .filter(Boolean)
      .join('\n'),
  );
  const abAgrees =
    (report.overlapOff?.maxRelativeDifference ?? 0) <= tolerance &&
    (report.zeroOther?.maxRelativeDifference ?? 0) <= tolerance;
  return lossesAgree && abAgrees && (fault?.passed ?? true) ? 0 : 1;
}

/** The `--bucket-mb` value in bytes. */
export function bucketBytesOf(value: string): number {
  const mb = Number(value);
  if (!(mb > 0) || !Number.isFinite(mb)) {
    throw new InvalidArgumentError('--bucket-mb must be a positive number of MiB', {
      operation: 'dp-bench',
      argument: '--bucket-mb',
      expected: 'a number > 0',
      actual: value,
    });
  }
  return Math.round(mb * 2 ** 20);
}

/** The `--zero` value: the settings to run the N-GPU benchmark with, in order (`both` = on, off). */
export function zeroSettings(value: string): ('on' | 'off')[] {
  const settings = value === 'both' ? ['on', 'off'] : value.split(',');
  if (settings.length > 2 || settings.some((s) => s !== 'on' && s !== 'off')) {
    throw new InvalidArgumentError('unknown --zero setting', {
      operation: 'dp-bench',
      argument: '--zero',
      expected: 'on | off | both | on,off | off,on',
      actual: value,
    });
  }
  return settings as ('on' | 'off')[];
}

/** The `--precision` value. */
export function precisionOf(value: string): 'f32' | 'bf16' {
  if (value === 'f32' || value === 'bf16') return value;
  throw new InvalidArgumentError('unknown --precision', {
    operation: 'dp-bench',
    argument: '--precision',
    expected: 'f32 | bf16',
    actual: value,
  });
}

/** The `--overlap` value: the settings to run the N-GPU benchmark with, in order. */
export function overlapSettings(value: string): ('on' | 'off')[] {
  if (value === 'on' || value === 'off') return [value];
  if (value === 'both') return ['on', 'off'];
  throw new InvalidArgumentError('unknown --overlap setting', {
    operation: 'dp-bench',
    argument: '--overlap',
    expected: 'on | off | both',
    actual: value,
  });
}

/** A request file like `request` with one setting changed (`overlap` or `zero`). */
async function requestWith(
  out: string,
  request: DataParallelRequest,
  change: { readonly overlap: boolean } | { readonly zero: boolean },
): Promise<string> {
  const [[key, value]] = Object.entries(change) as [[string, boolean]];
  const path = join(out, `request-${key}-${value ? 'on' : 'off'}.json`);
  await writeFile(path, `${JSON.stringify({ ...request, ...change }, null, 2)}\n`);
  return path;
}
