import { readFile } from 'node:fs/promises';
import { type Communicator, type HostArray, SingleRankCommunicator, type Tensor } from '@rayo/core';
import { createCudaBackend, NcclCommunicator } from '@rayo/cuda-ptx';
import {
  DataParallel,
  dataParallelStep,
  joinRendezvous,
  leaveRendezvous,
  ReplayedDataParallelStep,
  rankEnvironment,
  ShardedAdamW,
  shardRange,
  type Tape,
  type TcpStore,
  watchPeers,
} from '@rayo/train';
import type { THROUGHPUT_ADAMW } from '../train/throughput.js';
import { buildWorkload, type TransformerWorkloadSpec } from '../train/workload.js';

/** What the driver asks every rank to do (the PyTorch DDP baseline reads the same file). */
export interface DataParallelRequest {
  readonly schema: typeof DP_REQUEST_SCHEMA;
  /** The model and the global batch (split across the ranks). */
  readonly spec: TransformerWorkloadSpec;
  readonly seed: number;
  readonly warmup: number;
  readonly steps: number;
  readonly clipNorm: number;
  readonly adamw: typeof THROUGHPUT_ADAMW;
  /** `replayed`: the step recorded once (ReplayedDataParallelStep); `eager`: recorded anew every step (dataParallelStep). */
  readonly mode: 'replayed' | 'eager';
  /**
   * Whether gradient buckets are all-reduced overlapped with the rest of
   * backward (default true); a run of one rank has nothing to overlap and
   * records backward whole.
   */
  readonly overlap?: boolean;
  /** Gradient bytes per all-reduce bucket (default: DataParallel's, PyTorch DDP's 25 MiB). */
  readonly bucketBytes?: number;
  /**
   * Shard AdamW across the ranks (ZeRO stage 1: gradients reduce-scattered,
   * parameters all-gathered; default false); one rank has nothing to shard.
   * The PyTorch baseline uses ZeroRedundancyOptimizer then.
   */
  readonly zero?: boolean;
  /** The fault check: this rank is killed (SIGKILL) at the start of `killAtStep`. */
  readonly killRank?: number;
  readonly killAtStep?: number;
  /** The communicator's timeout for a collective (the fault check shortens it). */
  readonly timeoutMs?: number;
}

export const DP_REQUEST_SCHEMA = 'rayo-dp-request/1';

/** What rank 0 prints as its last line. */
export interface DataParallelRun {
  readonly world: number;
  readonly device: string;
  /** The mean loss over the ranks at every step (warm-up included). */
  readonly losses: readonly number[];
  /** Step times (ms) after the warm-up, from the start of a step to its loss readback. */
  readonly times: readonly number[];
  /**
   * The bucketed all-reduce of one step's gradient bytes alone, from enqueue
   * to the device being done (median ms of a few), and those bytes; absent on one rank.
   */
  readonly allReduce?: { readonly ms: number; readonly bytes: number; readonly flatMs: number };
  /** Whether the all-reduce was overlapped with backward (false on one rank), and in how many segments backward was recorded. */
  readonly overlap: boolean;
  readonly segments?: number;
  /** Whether the optimizer was sharded (false on one rank). */
  readonly zero: boolean;
  /** Every rank's peak of allocated device bytes over the run, by rank. */
  readonly peakBytes: readonly number[];
  /** Bytes of optimizer tensors on rank 0 (m and v; sharded: m and v of its block). */
  readonly optimizerBytes: number;
}

/**
 * Times `parallel`'s bucketed all-reduce alone, over tensors shaped as the
 * gradients (the parameters: identical on every rank, so averaging leaves
 * them as they are), and the same bytes as one flat tensor per bucket.
 */
async function timeAllReduce(parallel: DataParallel, sync: () => Promise<void>, reps = 5) {
  const median = async (run: () => void) => {
    const times: number[] = [];
    for (let i = 0; i <= reps; i++) {
      const begin = performance.now();
      run();
      await sync();
      parallel.throwIfFailed();
      if (i > 0) times.push(performance.now() - begin);
    }
    times.sort((a, b) => a - b);
    return times[Math.floor(times.length / 2)]!;
  };
  const ms = await median(() => parallel.allReduceGradientsOf((p) => p.value));
  const backend = parallel.communicator.backend;
  const flat = parallel.buckets.map((b) => backend.zeros([b.bytes / 4]));
  try {
    const flatMs = await median(() => {
      for (const t of flat) parallel.communicator.allReduce([t], 'avg');
    });
    const bytes = parallel.buckets.reduce((sum, b) => sum + b.bytes, 0);
    return { ms, bytes, flatMs };
  } finally {
    for (const t of flat) t.dispose();
  }
}

/** Every rank's `value`, by rank (an all-gather). */
async function everyRank(communicator: Communicator, value: number): Promise<number[]> {
  const backend = communicator.backend;
  const mine = backend.upload([value], [1]);
  const all = backend.zeros([communicator.size]);
  try {
    communicator.allGather(mine, all);
    return Array.from(await all.read());
  } finally {
    mine.dispose();
    all.dispose();
  }
}

/** Columns [start, end) of every row of a row-major [rows, columns] array (a rank's sequences of [seq, batch] tokens). */
export function batchColumns<T extends HostArray>(
  data: T,
  rows: number,
  cols: number,
  start: number,
  end: number,
): T {
  const width = end - start;
  const out = new (data.constructor as new (n: number) => T)(rows * width);
  for (let r = 0; r < rows; r++) out.set(data.subarray(r * cols + start, r * cols + end) as never, r * width);
  return out;
}

/**
 * One rank of the data-parallel benchmark: the CUDA backend on the one GPU
 * it sees, NCCL through the rendezvous store (one rank needs neither), the
 * causal LM of train-bench built from the seed on every rank, and this rank's
 * columns of the global batch (sequences are the second axis).
 */
export async function runDataParallelWorker(requestPath: string): Promise<void> {
  const request = JSON.parse(await readFile(requestPath, 'utf8')) as DataParallelRequest;
  const where = rankEnvironment();
  const backend = await createCudaBackend();
  let communicator: Communicator;
  let store: TcpStore | undefined;
  if (where.size === 1) {
    communicator = new SingleRankCommunicator(backend);
  } else {
    ({ store } = await joinRendezvous(where));
    communicator = await NcclCommunicator.create({
      backend,
      rank: where.rank,
      size: where.size,
      store,
      timeoutMs: request.timeoutMs,
      onFailure: (error) => {
        console.error(`rank ${where.rank}: ${error.message}`);
        process.exit(1);
      },
    });
    // The store stays open while training: a rank whose process ends is noticed at once.
    watchPeers(store, communicator, (error) => {
      console.error(error.message);
      process.exit(1);
    });
  }
  const { spec } = request;
  const work = buildWorkload(backend, spec, request.seed);
  const { start, end } = shardRange(spec.batch, where.rank, where.size);
  const ids = batchColumns(work.batch.ids!.data as Int32Array, spec.seq, spec.batch, start, end);
  const targets = batchColumns(work.batch.targets!.data as Int32Array, spec.seq, spec.batch, start, end);
  const shard: Record<string, Tensor> = {
    ids: backend.upload(ids, [spec.seq, end - start], 'i32'),
    targets: backend.upload(targets, [spec.seq * (end - start)], 'i32'),
  };
  const zero = (request.zero ?? false) && where.size > 1;
  const parallel = new DataParallel({
    communicator,
    model: work.model,
    shardOptimizer: zero,
    ...(request.bucketBytes ? { bucketBytes: request.bucketBytes } : {}),
  });
  parallel.broadcastParameters();
  const optimizer = parallel.createAdamW(request.adamw);
  const optimizerBytes =
    optimizer instanceof ShardedAdamW
      ? optimizer.stateBytes
      : optimizer.stateTensors().reduce((sum, [, t]) => sum + t.byteLength, 0);
  backend.resetPeakMemory();
  const loss = (tape: Tape) => work.lossOn(tape, shard);
  const { clipNorm } = request;
  const overlap = (request.overlap ?? true) && where.size > 1;
  const replayed =
    request.mode === 'replayed'
      ? new ReplayedDataParallelStep({
          backend,
          optimizer,
          parallel,
          loss,
          clipNorm,
          overlap,
          gatherAhead: zero,
        })
      : undefined;
  const losses: number[] = [];
  const times: number[] = [];
  for (let step = 0; step < request.warmup + request.steps; step++) {
    if (step === request.killAtStep && where.rank === request.killRank) process.kill(process.pid, 'SIGKILL');
    const begin = performance.now();
    const result = replayed
      ? await replayed.run()
      : await dataParallelStep({ backend, optimizer, parallel, clipNorm, loss, overlap });
    if (step >= request.warmup) times.push(performance.now() - begin);
    losses.push(result.loss!);
  }
  const segments = replayed?.segments.length;
  const peakBytes = await everyRank(communicator, backend.memory().peakAllocatedBytes);
  replayed?.dispose();
  const allReduce = where.size > 1 ? await timeAllReduce(parallel, () => backend.sync()) : undefined;
  if (store) await leaveRendezvous(store, where);
  if (where.rank === 0) {
    const run: DataParallelRun = {
      world: where.size,
      device: backend.info.device,
      losses,
      times,
      allReduce,
      overlap,
      segments,
      zero,
      peakBytes,
      optimizerBytes,
    };
    console.log(JSON.stringify(run));
  }
  await communicator.dispose();
  optimizer.dispose();
  work.dispose();
  for (const t of Object.values(shard)) t.dispose();
  backend.dispose();
}
