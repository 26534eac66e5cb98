import {
  type LibNccl,
  NCCL_DATA_TYPE,
  NCCL_RED_OP,
  NCCL_RESULT,
  NCCL_UNIQUE_ID_BYTES,
  type NcclOut,
  type NcclResult,
} from '@rayo/cuda-ptx';
import type { CollectiveLibCuda } from './collectiveLibCuda.js';

/** One collective call of one rank. */
interface Contribution {
  readonly kind: 'allReduce' | 'broadcast' | 'allGather' | 'reduceScatter';
  readonly rank: number;
  readonly cuda: CollectiveLibCuda;
  readonly stream: bigint;
  readonly send: bigint;
  readonly recv: bigint;
  readonly count: number;
  readonly dtype: number;
  readonly op: number;
  readonly root: number;
  data?: Uint8Array;
  done: boolean;
}

class Clique {
  readonly members = new Map<number, Comm>();
  readonly #pending = new Map<number, Contribution[]>();
  /** Why the clique broke (a rank aborted, or the ranks disagreed), once it has. */
  broken: { readonly by: number; readonly message: string } | undefined;

  constructor(readonly nranks: number) {}

  get complete(): boolean {
    return this.members.size === this.nranks;
  }

  /** Adds a rank's contribution to collective number `seq`, completing it when it is the last. */
  post(seq: number, c: Contribution): void {
    const all = this.#pending.get(seq) ?? [];
    this.#pending.set(seq, all);
    all.push(c);
    if (all.length < this.nranks) return;
    this.#pending.delete(seq);
    const first = all[0]!;
    const mismatch = all.find(
      (o) =>
        o.kind !== first.kind || o.count !== first.count || o.dtype !== first.dtype || o.root !== first.root,
    );
    if (mismatch) {
      this.break(
        mismatch.rank,
        `collective ${seq}: rank ${first.rank} called ${first.kind}(${first.count}) and rank ${mismatch.rank} ${mismatch.kind}(${mismatch.count})`,
      );
      return;
    }
    complete(all.sort((a, b) => a.rank - b.rank));
  }

  break(by: number, message: string): void {
    this.broken ??= { by, message };
    // Pending work is dropped, as an abort stops NCCL's kernels; the streams run on.
    for (const list of this.#pending.values()) for (const c of list) finish(c);
    this.#pending.clear();
  }
}

class Comm {
  seq = 0;
  constructor(
    readonly handle: bigint,
    readonly clique: Clique,
    readonly rank: number,
    readonly cuda: CollectiveLibCuda,
  ) {}
}

function finish(c: Contribution): void {
  c.done = true;
  c.cuda.drain(c.stream);
}

type Elements = Float32Array | Int32Array | Uint32Array;

function view(bytes: Uint8Array, dtype: number): Elements {
  const { buffer, byteOffset, byteLength } = bytes;
  if (dtype === NCCL_DATA_TYPE.float32) return new Float32Array(buffer, byteOffset, byteLength / 4);
  if (dtype === NCCL_DATA_TYPE.int32) return new Int32Array(buffer, byteOffset, byteLength / 4);
  return new Uint32Array(buffer, byteOffset, byteLength / 4);
}

const REDUCERS: Record<number, (a: number, b: number) => number> = {
  [NCCL_RED_OP.sum]: (a, b) => a + b,
  [NCCL_RED_OP.avg]: (a, b) => a + b,
  [NCCL_RED_OP.prod]: (a, b) => a * b,
  [NCCL_RED_OP.max]: Math.max,
  [NCCL_RED_OP.min]: Math.min,
};

function reduce(all: readonly Contribution[]): Elements {
  const { dtype, op } = all[0]!;
  const out = view(all[0]!.data!.slice(), dtype);
  for (const c of all.slice(1)) {
    const x = view(c.data!, dtype);
    for (let i = 0; i < out.length; i++) out[i] = REDUCERS[op]!(out[i]!, x[i]!);
  }
  if (op === NCCL_RED_OP.avg) for (let i = 0; i < out.length; i++) out[i] = out[i]! / all.length;
  return out;
}

function bytesOf(e: Elements): Uint8Array {
  return new Uint8Array(e.buffer, e.byteOffset, e.byteLength);
}

function complete(all: readonly Contribution[]): void {
  const first = all[0]!;
  const n = all.length;
  for (const c of all) {
    let result: Uint8Array;
    switch (first.kind) {
      case 'allReduce':
        result = bytesOf(reduce(all));
        break;
      case 'broadcast':
        result = all[first.root]!.data!;
        break;
      case 'allGather': {
        result = new Uint8Array(first.data!.length * n);
        for (const o of all) result.set(o.data!, o.rank * first.data!.length);
        break;
      }
      case 'reduceScatter': {
        const block = first.data!.length / n;
        result = bytesOf(reduce(all)).slice(c.rank * block, (c.rank + 1) * block);
        break;
      }
    }
    c.cuda.memory.write(c.recv, result);
  }
  for (const c of all) finish(c);
}

const ELEMENT_BYTES = 4;

/**
 * NCCL's semantics in JS for tests, for ranks driven by one process: each
 * rank is a CUDA backend of its own (its own stream) over one
 * CollectiveLibCuda, whose memory they share as devices of one process share
 * an address space. Communicators join a clique by unique id and are ready
 * once all ranks have joined (init is non-blocking, as rayo uses it). A
 * collective takes its send data when it reaches the head of its stream, and
 * completes, writing every rank's receive buffer, when the last rank's call
 * arrives; the streams wait meanwhile. Aborting one rank makes every other
 * rank's `ncclCommGetAsyncError` report a remote error, as NCCL does when a
 * peer dies. Collectives of f32, i32 and u32 are emulated.
 */
export class FakeNccl implements LibNccl {
  readonly path = 'fake libnccl';
  /** Calls of every rank, in order, e.g. `ncclAllReduce(rank 1)`. */
  readonly calls: string[] = [];
  readonly #cliques = new Map<string, Clique>();
  readonly #comms = new Map<bigint, Comm>();
  #nextHandle = 0x4e00_0000n;
  #nextId = 1;
  #groupDepth = 0;
  #lastError = '';

  constructor(private readonly cuda: CollectiveLibCuda) {}

  ncclGetVersion(): NcclOut<number> {
    return { status: 0, value: 22304 };
  }

  ncclGetUniqueId(): NcclOut<Uint8Array> {
    const id = new Uint8Array(NCCL_UNIQUE_ID_BYTES);
    new DataView(id.buffer).setUint32(0, this.#nextId++);
    return { status: 0, value: id };
  }

  ncclCommInitRankNonBlocking(nranks: number, id: Uint8Array, rank: number): NcclOut<bigint> {
    if (!Number.isInteger(rank) || rank < 0 || rank >= nranks || id.length !== NCCL_UNIQUE_ID_BYTES) {
      return { status: this.#invalid(`invalid rank ${rank} of ${nranks}`), value: 0n };
    }
    const key = Array.from(id, (b) => b.toString(16)).join('');
    let clique = this.#cliques.get(key);
    if (!clique) {
      clique = new Clique(nranks);
      this.#cliques.set(key, clique);
    }
    if (clique.members.has(rank) || clique.nranks !== nranks) {
      return {
        status: this.#invalid(`rank ${rank} of ${nranks} does not fit the clique of ${clique.nranks}`),
        value: 0n,
      };
    }
    const comm = new Comm(this.#nextHandle++, clique, rank, this.cuda);
    clique.members.set(rank, comm);
    this.#comms.set(comm.handle, comm);
    return { status: comm.clique.complete ? 0 : NCCL_RESULT.inProgress, value: comm.handle };
  }

  ncclCommGetAsyncError(handle: bigint): NcclOut<NcclResult> {
    const comm = this.#comms.get(handle);
    if (!comm) return { status: this.#invalid('unknown communicator'), value: 0 };
    const broken = this.#brokenResult(comm);
    if (broken !== undefined) return { status: 0, value: broken };
    return { status: 0, value: comm.clique.complete ? 0 : NCCL_RESULT.inProgress };
  }

  ncclCommAbort(handle: bigint): NcclResult {
    const comm = this.#comms.get(handle);
    if (!comm) return this.#invalid('unknown communicator');
    this.calls.push(`ncclCommAbort(rank ${comm.rank})`);
    comm.clique.break(comm.rank, `rank ${comm.rank} aborted`);
    this.#comms.delete(comm.handle);
    return 0;
  }

  ncclCommFinalize(handle: bigint): NcclResult {
    return this.#comms.get(handle) ? 0 : this.#invalid('unknown communicator');
  }

  ncclCommDestroy(handle: bigint): NcclResult {
    const comm = this.#comms.get(handle);
    if (!comm) return this.#invalid('unknown communicator');
    this.#comms.delete(comm.handle);
    return 0;
  }

  ncclGetErrorString(result: NcclResult): string {
    const names: Record<number, string> = {
      0: 'no error',
      2: 'unhandled system error',
      4: 'invalid argument',
      5: 'invalid usage',
      6: 'remote process exited or there was a network error',
      7: 'NCCL operation in progress',
    };
    return names[result] ?? 'unknown result code';
  }

  ncclGetLastError(): string {
    return this.#lastError;
  }

  ncclGroupStart(): NcclResult {
    this.#groupDepth++;
    return 0;
  }

  ncclGroupEnd(): NcclResult {
    if (this.#groupDepth === 0)
      return this.#invalid('ncclGroupEnd without ncclGroupStart', NCCL_RESULT.invalidUsage);
    this.#groupDepth--;
    return 0;
  }

  ncclAllReduce(...[send, recv, count, dtype, op, comm, stream]: Parameters<LibNccl['ncclAllReduce']>) {
    return this.#collective('allReduce', { send, recv, count, dtype, op, root: 0 }, count, comm, stream);
  }

  ncclBroadcast(...[send, recv, count, dtype, root, comm, stream]: Parameters<LibNccl['ncclBroadcast']>) {
    return this.#collective('broadcast', { send, recv, count, dtype, op: 0, root }, count, comm, stream);
  }

  ncclAllGather(send: bigint, recv: bigint, count: number, dtype: number, comm: bigint, stream: bigint) {
    return this.#collective('allGather', { send, recv, count, dtype, op: 0, root: 0 }, count, comm, stream);
  }

  ncclReduceScatter(
    ...[send, recv, count, dtype, op, comm, stream]: Parameters<LibNccl['ncclReduceScatter']>
  ) {
    const c = this.#comms.get(comm);
    const sent = c ? count * c.clique.nranks : count;
    return this.#collective('reduceScatter', { send, recv, count, dtype, op, root: 0 }, sent, comm, stream);
  }

  #collective(
    kind: Contribution['kind'],
    args: Pick<Contribution, 'send' | 'recv' | 'count' | 'dtype' | 'op' | 'root'>,
    sendCount: number,
    handle: bigint,
    stream: bigint,
  ): NcclResult {
    const comm = this.#comms.get(handle);
    if (!comm) return this.#invalid('unknown communicator');
    this.calls.push(`nccl${kind[0]!.toUpperCase()}${kind.slice(1)}(rank ${comm.rank})`);
    if (!comm.clique.complete)
      return this.#invalid('the communicator is not initialised yet', NCCL_RESULT.invalidUsage);
    const broken = this.#brokenResult(comm);
    if (broken !== undefined) return broken;
    if (![NCCL_DATA_TYPE.float32, NCCL_DATA_TYPE.int32, NCCL_DATA_TYPE.uint32].includes(args.dtype as 7)) {
      return this.#invalid(`the fake does not emulate data type ${args.dtype}`);
    }
    if (REDUCERS[args.op] === undefined) return this.#invalid(`invalid reduction operation ${args.op}`);
    if (args.root < 0 || args.root >= comm.clique.nranks) return this.#invalid(`invalid root ${args.root}`);
    if (this.cuda.isCapturing(stream)) {
      return this.#invalid('the fake does not capture collectives into graphs', NCCL_RESULT.invalidUsage);
    }
    const c: Contribution = { kind, rank: comm.rank, cuda: this.cuda, stream, ...args, done: false };
    const seq = comm.seq++;
    let posted = false;
    this.cuda.enqueue(stream, {
      advance: () => {
        if (!posted) {
          posted = true;
          c.data = this.cuda.memory.read(args.send, sendCount * ELEMENT_BYTES).slice();
          comm.clique.post(seq, c);
        }
        return c.done;
      },
    });
    return 0;
  }

  /** What a rank of a broken clique is told: the rank at fault its own error, the others a remote error. */
  #brokenResult(comm: Comm): NcclResult | undefined {
    const broken = comm.clique.broken;
    if (!broken) return undefined;
    const own = broken.by === comm.rank;
    this.#lastError = own
      ? broken.message
      : `remote process exited or there was a network error (${broken.message})`;
    return own ? NCCL_RESULT.invalidUsage : NCCL_RESULT.remoteError;
  }

  #invalid(message: string, status: NcclResult = NCCL_RESULT.invalidArgument): NcclResult {
    this.#lastError = message;
    return status;
  }
}
