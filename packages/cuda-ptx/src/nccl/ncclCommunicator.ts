import {
  CollectiveError,
  type CollectiveOptions,
  type Communicator,
  collectiveChecks,
  type DType,
  DTypeError,
  InvalidArgumentError,
  type OverlapMark,
  type ReduceOp,
  type RendezvousStore,
  type Tensor,
} from '@rayo/core';
import type { CudaBackend } from '../backend.js';
import {
  type LibNccl,
  libNccl,
  NCCL_DATA_TYPE,
  NCCL_RED_OP,
  NCCL_RESULT,
  type NcclResult,
} from './libnccl.js';
import { abortOnSignals } from './signals.js';

export interface NcclCommunicatorOptions {
  readonly backend: CudaBackend;
  readonly rank: number;
  readonly size: number;
  /** NCCL's unique id from rank 0; or a store through which rank 0 hands it to the others. */
  readonly uniqueId?: Uint8Array;
  readonly store?: RendezvousStore;
  /** The store key of the unique id (one per communicator built over one store). */
  readonly storeKey?: string;
  /** NCCL, loaded from `libnccl.so.2` by default. */
  readonly lib?: LibNccl;
  /**
   * A collective still unfinished this long after it was enqueued (a dead
   * or stuck peer) aborts the communicator; also bounds the initialisation.
   * Default 25 s: long enough for a slow step of a peer, short enough that a
   * rank whose peer died exits within half a minute.
   */
  readonly timeoutMs?: number;
  /** How often the watchdog polls `ncclCommGetAsyncError` and the pending collectives; default 100 ms. */
  readonly pollMs?: number;
  /** Called once when the watchdog aborts the communicator (e.g. to exit the process). */
  readonly onFailure?: (error: CollectiveError) => void;
  /** Abort on SIGINT/SIGTERM before the process dies, so that peers fail fast; default true. */
  readonly abortOnSignals?: boolean;
}

const NCCL_DTYPES: Partial<Record<DType, number>> = {
  f32: NCCL_DATA_TYPE.float32,
  f16: NCCL_DATA_TYPE.float16,
  bf16: NCCL_DATA_TYPE.bfloat16,
  i32: NCCL_DATA_TYPE.int32,
  u32: NCCL_DATA_TYPE.uint32,
};

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/**
 * A `Communicator` over NCCL for one rank: one process (or one CUDA backend)
 * per GPU. Collectives are enqueued on the backend's stream, so they are
 * ordered with its kernels, copies and reads. The communicator is
 * non-blocking (`ncclConfig_t.blocking = 0`) so that nothing in it can block
 * the event loop: a watchdog polls `ncclCommGetAsyncError` and the events
 * recorded after the last collective on each stream, and aborts
 * (`ncclCommAbort`) on an error or a timeout; every later call throws that
 * `CollectiveError`.
 *
 * An overlapped collective (`{ overlap: true }`) runs on a stream of the
 * communicator's own (non-blocking, made on first use): an event recorded on
 * the backend's stream makes it start after the work enqueued so far, and an
 * event recorded behind it on the communicator's stream is what
 * `joinOverlapped()` makes the backend's stream wait for. The backend's
 * `sync()` and reads wait for the backend's stream only: until the join they
 * do not wait for overlapped collectives. Every other collective joins
 * first, so that all of them keep one order on the GPU; NCCL needs every
 * rank to run a communicator's collectives in the same order.
 */
export class NcclCommunicator implements Communicator {
  readonly backend: CudaBackend;
  readonly rank: number;
  readonly size: number;
  readonly lib: LibNccl;
  readonly #comm: bigint;
  readonly #timeoutMs: number;
  readonly #onFailure: ((error: CollectiveError) => void) | undefined;
  readonly #done: bigint;
  /** The stream of overlapped collectives and its two ordering events, made on first use. */
  #overlap: { readonly stream: bigint; readonly start: bigint; readonly done: bigint } | undefined;
  /** Whether overlapped collectives were issued since the backend's stream last joined them. */
  #unjoined = false;
  /** Events of the marks on the overlap stream (`markOverlapped`), reused after each full join. */
  readonly #marks: bigint[] = [];
  #marked = 0;
  /** Full joins so far: marks of an earlier round are behind one. */
  #round = 0;
  readonly #watchdog: ReturnType<typeof setInterval>;
  readonly #untrackSignals: () => void;
  #pendingSince: number | undefined;
  #overlapPendingSince: number | undefined;
  #failure: CollectiveError | undefined;
  #closed: string | undefined;
  #barrierScratch: Tensor | undefined;
  readonly #failureWaiters = new Set<(error: CollectiveError) => void>();

  /** Joins the communicator of `size` ranks: exchanges the unique id, then initialises NCCL without blocking. */
  static async create(options: NcclCommunicatorOptions): Promise<NcclCommunicator> {
    const { backend, rank, size } = options;
    if (!Number.isInteger(size) || size < 1) {
      throw new InvalidArgumentError('size must be a positive integer', {
        operation: 'NcclCommunicator.create',
        argument: 'size',
        expected: 'an integer ≥ 1',
        actual: String(size),
      });
    }
    collectiveChecks.root('NcclCommunicator.create', rank, size);
    const lib = options.lib ?? (await libNccl());
    const timeoutMs = options.timeoutMs ?? 25_000;
    const id = await uniqueIdOf(lib, options);
    backend.driver.activate();
    const init = lib.ncclCommInitRankNonBlocking(size, id, rank);
    if (init.status !== NCCL_RESULT.success && init.status !== NCCL_RESULT.inProgress) {
      throw ncclError(lib, 'ncclCommInitRankConfig', init.status, init.value, `rank ${rank} of ${size}`);
    }
    const comm = init.value;
    const deadline = performance.now() + timeoutMs;
    for (;;) {
      const state = lib.ncclCommGetAsyncError(comm);
      const result = state.status === NCCL_RESULT.success ? state.value : state.status;
      if (result === NCCL_RESULT.success) break;
      if (result !== NCCL_RESULT.inProgress || performance.now() > deadline) {
        const error =
          result === NCCL_RESULT.inProgress
            ? new CollectiveError(
                `rank ${rank} of ${size}: the other ranks did not join within ${timeoutMs} ms`,
                {
                  operation: 'ncclCommInitRankConfig',
                },
              )
            : ncclError(lib, 'ncclCommInitRankConfig', result, comm, `rank ${rank} of ${size}`);
        lib.ncclCommAbort(comm);
        throw error;
      }
      await sleep(2);
    }
    return new NcclCommunicator(options, lib, comm, timeoutMs);
  }

  /**
   * Communicators of several GPUs driven by one process (one backend each):
   * rank r is `backends[r]`. Collectives over them must then be issued inside
   * `NcclCommunicator.group(lib, ...)` so that NCCL launches them together.
   */
  static async createGroup(
    backends: readonly CudaBackend[],
    options: Omit<NcclCommunicatorOptions, 'backend' | 'rank' | 'size' | 'store' | 'uniqueId'> = {},
  ): Promise<NcclCommunicator[]> {
    const lib = options.lib ?? (await libNccl());
    const uniqueId = checked(lib, 'ncclGetUniqueId', lib.ncclGetUniqueId());
    return Promise.all(
      backends.map((backend, rank) =>
        NcclCommunicator.create({ ...options, lib, backend, rank, size: backends.length, uniqueId }),
      ),
    );
  }

  /** Runs `issue` between `ncclGroupStart` and `ncclGroupEnd` (collectives of several communicators of one process). */
  static group<T>(lib: LibNccl, issue: () => T): T {
    check(lib, 'ncclGroupStart', lib.ncclGroupStart());
    let result: T;
    try {
      result = issue();
    } finally {
      check(lib, 'ncclGroupEnd', lib.ncclGroupEnd());
    }
    return result;
  }

  private constructor(options: NcclCommunicatorOptions, lib: LibNccl, comm: bigint, timeoutMs: number) {
    this.backend = options.backend;
    this.rank = options.rank;
    this.size = options.size;
    this.lib = lib;
    this.#comm = comm;
    this.#timeoutMs = timeoutMs;
    this.#onFailure = options.onFailure;
    this.#done = this.backend.driver.createEvent({ timing: false });
    this.#watchdog = setInterval(() => this.#poll(), options.pollMs ?? 100);
    this.#watchdog.unref();
    this.#untrackSignals = options.abortOnSignals === false ? () => {} : abortOnSignals(this);
  }

  /** The error that aborted the communicator, if one did. */
  get failure(): CollectiveError | undefined {
    return this.#failure;
  }

  allReduce(tensors: readonly Tensor[], op: ReduceOp = 'sum', options: CollectiveOptions = {}): void {
    this.#alive('allReduce');
    const code = NCCL_RED_OP[collectiveChecks.op('allReduce', op)];
    const operands = tensors
      .map((t, i) => ({
        ptr: this.#pointer('allReduce', `tensors[${i}]`, t),
        dtype: this.#dtype('allReduce', `tensors[${i}]`, t),
        count: t.size,
      }))
      .filter((o) => o.count > 0);
    if (operands.length === 0) return;
    // Several tensors go in one NCCL group, which NCCL fuses into as few kernels as it can.
    const grouped = operands.length > 1;
    this.#issue('ncclAllReduce', options.overlap === true, (stream) => {
      if (grouped) check(this.lib, 'ncclGroupStart', this.lib.ncclGroupStart());
      let status: NcclResult = NCCL_RESULT.success;
      for (const o of operands) {
        status = this.lib.ncclAllReduce(o.ptr, o.ptr, o.count, o.dtype, code, this.#comm, stream);
        if (status !== NCCL_RESULT.success) break;
      }
      if (grouped) {
        const end = this.lib.ncclGroupEnd();
        if (status === NCCL_RESULT.success) status = end;
      }
      return status;
    });
  }

  broadcast(tensor: Tensor, root = 0): void {
    this.#alive('broadcast');
    collectiveChecks.root('broadcast', root, this.size);
    const ptr = this.#pointer('broadcast', 'tensor', tensor);
    const dtype = this.#dtype('broadcast', 'tensor', tensor);
    if (tensor.size === 0) return;
    this.#issue('ncclBroadcast', false, (stream) =>
      this.lib.ncclBroadcast(ptr, ptr, tensor.size, dtype, root, this.#comm, stream),
    );
  }

  allGather(input: Tensor, output: Tensor, options: CollectiveOptions = {}): void {
    this.#alive('allGather');
    const [send, recv, dtype] = this.#pair('allGather', input, output);
    collectiveChecks.blocks('allGather', input, output, 'output', this.size);
    if (input.size === 0) return;
    this.#issue('ncclAllGather', options.overlap === true, (stream) =>
      this.lib.ncclAllGather(send, recv, input.size, dtype, this.#comm, stream),
    );
  }

  reduceScatter(input: Tensor, output: Tensor, op: ReduceOp = 'sum', options: CollectiveOptions = {}): void {
    this.#alive('reduceScatter');
    const code = NCCL_RED_OP[collectiveChecks.op('reduceScatter', op)];
    const [recv, send, dtype] = this.#pair('reduceScatter', output, input);
    collectiveChecks.blocks('reduceScatter', output, input, 'input', this.size);
    if (output.size === 0) return;
    this.#issue('ncclReduceScatter', options.overlap === true, (stream) =>
      this.lib.ncclReduceScatter(send, recv, output.size, dtype, code, this.#comm, stream),
    );
  }

  /**
   * Makes the backend's stream wait (on the GPU) for every overlapped
   * collective issued so far; cheap, and a no-op when there is none.
   */
  joinOverlapped(mark?: OverlapMark): void {
    if (!this.#unjoined || this.#closed !== undefined) return;
    this.backend.checkAlive('joinOverlapped');
    if (mark) {
      // A mark of an earlier round is behind a full join already.
      if (mark.round !== this.#round) return;
      const event = this.#marks[mark.index];
      if (event === undefined || mark.index >= this.#marked) {
        throw new InvalidArgumentError('the mark is not one this communicator made', {
          operation: 'joinOverlapped',
          argument: 'mark',
          expected: `a mark of this round (index < ${this.#marked})`,
          actual: `index ${mark.index}`,
        });
      }
      this.backend.driver.waitEvent(this.backend.stream, event);
      return;
    }
    this.backend.driver.waitEvent(this.backend.stream, this.#overlap!.done);
    this.#unjoined = false;
    // Every mark is behind the join: their events may be recorded again.
    this.#marked = 0;
    this.#round++;
  }

  /** An event recorded on the overlap stream after the collectives issued so far (one per mark, reused after a full join). */
  markOverlapped(): OverlapMark | undefined {
    if (!this.#unjoined || this.#closed !== undefined) return undefined;
    const driver = this.backend.driver;
    const index = this.#marked++;
    this.#marks[index] ??= driver.createEvent({ timing: false });
    driver.recordEvent(this.#marks[index]!, this.#overlap!.stream);
    return { index, round: this.#round };
  }

  /** A one-element all-reduce, then a wait for the stream that fails as soon as the watchdog does. */
  async barrier(): Promise<void> {
    this.#barrierScratch ??= this.backend.upload(new Float32Array(1), [1]);
    this.allReduce([this.#barrierScratch]);
    await this.#orFailure(this.backend.sync());
  }

  abort(reason = 'aborted'): void {
    if (this.#closed !== undefined) return;
    this.#close(`aborted (${reason})`);
    this.lib.ncclCommAbort(this.#comm);
  }

  /** Waits for pending collectives, then finalises and destroys the NCCL communicator. */
  async dispose(): Promise<void> {
    if (this.#closed !== undefined) return;
    this.joinOverlapped();
    await this.#orFailure(this.backend.sync());
    this.backend.driver.activate();
    const finalize = this.lib.ncclCommFinalize(this.#comm);
    if (finalize !== NCCL_RESULT.success && finalize !== NCCL_RESULT.inProgress) {
      this.abort('ncclCommFinalize failed');
      throw ncclError(this.lib, 'ncclCommFinalize', finalize, this.#comm, `rank ${this.rank}`);
    }
    while (this.lib.ncclCommGetAsyncError(this.#comm).value === NCCL_RESULT.inProgress) await sleep(1);
    this.#close('disposed');
    this.#barrierScratch?.dispose();
    check(this.lib, 'ncclCommDestroy', this.lib.ncclCommDestroy(this.#comm));
    // Idle since the join and the sync above.
    this.backend.driver.destroyEvent(this.#done);
    for (const event of this.#marks) this.backend.driver.destroyEvent(event);
    this.#marks.length = 0;
    if (this.#overlap) {
      this.backend.driver.destroyEvent(this.#overlap.start);
      this.backend.driver.destroyEvent(this.#overlap.done);
      this.backend.driver.destroyStream(this.#overlap.stream);
      this.#overlap = undefined;
    }
  }

  // ------------------------------------------------------------------ internals

  /**
   * Enqueues one collective (`call` gets the stream): on the backend's
   * stream after joining the overlapped ones, or, overlapped, on the
   * communicator's stream once the backend's stream has reached this point.
   */
  #issue(api: string, overlap: boolean, call: (stream: bigint) => NcclResult): void {
    this.#alive(api);
    this.backend.checkAlive(api);
    const driver = this.backend.driver;
    driver.activate();
    let stream = this.backend.stream;
    if (overlap) {
      this.#overlap ??= {
        stream: driver.createStream(),
        start: driver.createEvent({ timing: false }),
        done: driver.createEvent({ timing: false }),
      };
      driver.recordEvent(this.#overlap.start, stream);
      stream = this.#overlap.stream;
      driver.waitEvent(stream, this.#overlap.start);
    } else {
      this.joinOverlapped();
    }
    let status = call(stream);
    // A non-blocking communicator may still be setting up connections: finish before the next call.
    const deadline = performance.now() + this.#timeoutMs;
    while (status === NCCL_RESULT.inProgress && performance.now() < deadline) {
      status = this.lib.ncclCommGetAsyncError(this.#comm).value;
    }
    if (status !== NCCL_RESULT.success) {
      throw this.#fail(ncclError(this.lib, api, status, this.#comm, `rank ${this.rank} of ${this.size}`));
    }
    // The watchdog times the oldest collective not yet seen finished, per stream.
    // Earlier ones found finished now no longer count, so that a loop that
    // enqueues again before the watchdog looks is not timed from its first step.
    const { lib } = driver;
    if (overlap) {
      if (this.#overlapPendingSince !== undefined && lib.cuEventQuery(this.#overlap!.done) === 0) {
        this.#overlapPendingSince = undefined;
      }
      driver.recordEvent(this.#overlap!.done, stream);
      this.#unjoined = true;
      this.#overlapPendingSince ??= performance.now();
    } else {
      if (this.#pendingSince !== undefined && lib.cuEventQuery(this.#done) === 0)
        this.#pendingSince = undefined;
      driver.recordEvent(this.#done, stream);
      this.#pendingSince ??= performance.now();
    }
  }

  #poll(): void {
    if (this.#closed !== undefined) return;
    try {
      this.#check();
    } catch (error) {
      // A timer has no caller to throw to: the backend disposed under the communicator, say.
      this.#fail(
        new CollectiveError(
          `rank ${this.rank} of ${this.size}: the watchdog failed: ${(error as Error).message}`,
          {
            operation: 'NcclCommunicator',
            cause: error,
          },
        ),
      );
    }
  }

  /** One look of the watchdog: NCCL's asynchronous error, then the age of the unfinished collectives. */
  #check(): void {
    this.backend.checkAlive('NcclCommunicator');
    const state = this.lib.ncclCommGetAsyncError(this.#comm);
    const result = state.status === NCCL_RESULT.success ? state.value : state.status;
    if (result !== NCCL_RESULT.success && result !== NCCL_RESULT.inProgress) {
      this.#fail(
        ncclError(this.lib, 'ncclCommGetAsyncError', result, this.#comm, `rank ${this.rank} of ${this.size}`),
      );
      return;
    }
    if (this.#pendingSince === undefined && this.#overlapPendingSince === undefined) return;
    this.backend.driver.activate();
    // Each stream on its own: a dead peer stalls an overlapped collective as much as any.
    const { lib } = this.backend.driver;
    if (this.#pendingSince !== undefined && lib.cuEventQuery(this.#done) === 0) {
      this.#pendingSince = undefined;
    }
    if (this.#overlapPendingSince !== undefined && lib.cuEventQuery(this.#overlap!.done) === 0) {
      this.#overlapPendingSince = undefined;
    }
    const since = Math.min(this.#pendingSince ?? Infinity, this.#overlapPendingSince ?? Infinity);
    if (performance.now() - since > this.#timeoutMs) {
      this.#fail(
        new CollectiveError(
          `rank ${this.rank} of ${this.size}: a collective did not complete within ${this.#timeoutMs} ms (a peer died or is stuck)`,
          {
            operation: 'NcclCommunicator',
            expected: `completion within ${this.#timeoutMs} ms`,
            actual: 'still pending',
          },
        ),
      );
    }
  }

  #fail(error: CollectiveError): CollectiveError {
    if (this.#failure) return this.#failure;
    this.#failure = error;
    this.#close(`aborted: ${error.message}`);
    this.lib.ncclCommAbort(this.#comm);
    for (const reject of this.#failureWaiters) reject(error);
    this.#onFailure?.(error);
    return error;
  }

  #close(reason: string): void {
    this.#closed = reason;
    clearInterval(this.#watchdog);
    this.#untrackSignals();
  }

  /** `work`, rejected early with the failure if the watchdog aborts meanwhile. */
  async #orFailure<T>(work: Promise<T>): Promise<T> {
    if (this.#failure) throw this.#failure;
    let reject: (error: CollectiveError) => void = () => {};
    const failed = new Promise<never>((_, r) => {
      reject = r;
    });
    this.#failureWaiters.add(reject);
    try {
      return await Promise.race([work, failed]);
    } finally {
      this.#failureWaiters.delete(reject);
    }
  }

  #alive(api: string): void {
    if (this.#failure) throw this.#failure;
    if (this.#closed !== undefined) {
      throw new CollectiveError(`the communicator was ${this.#closed}`, {
        operation: api,
        expected: 'a live communicator',
      });
    }
  }

  #pointer(api: string, argument: string, tensor: Tensor): bigint {
    collectiveChecks.backend(api, argument, tensor, this.backend);
    // A view's operand is its base's device address.
    return this.backend.operand(tensor).ptr;
  }

  #dtype(api: string, argument: string, tensor: Tensor): number {
    const code = NCCL_DTYPES[tensor.dtype];
    if (code === undefined) {
      throw new DTypeError('NCCL has no data type for this dtype', {
        operation: api,
        argument,
        expected: Object.keys(NCCL_DTYPES).join(' | '),
        actual: tensor.dtype,
      });
    }
    return code;
  }

  /**
   * Pointers and NCCL dtype of a per-rank tensor and its all-ranks
   * counterpart: apart, or the per-rank one this rank's block of the other
   * (in place, which NCCL takes as such).
   */
  #pair(api: string, part: Tensor, whole: Tensor): [bigint, bigint, number] {
    const a = this.#pointer(api, 'input', part);
    const b = this.#pointer(api, 'output', whole);
    collectiveChecks.inPlace(api, part, whole, this.rank);
    return [a, b, this.#dtype(api, 'input', part)];
  }
}

async function uniqueIdOf(lib: LibNccl, options: NcclCommunicatorOptions): Promise<Uint8Array> {
  if (options.uniqueId) return options.uniqueId;
  const { store, rank } = options;
  if (!store) {
    throw new InvalidArgumentError('a unique id or a rendezvous store is needed', {
      operation: 'NcclCommunicator.create',
      argument: 'store',
      expected: 'options.uniqueId or options.store',
      actual: 'neither',
    });
  }
  const key = options.storeKey ?? 'nccl/unique-id';
  if (rank !== 0) return store.get(key);
  const id = checked(lib, 'ncclGetUniqueId', lib.ncclGetUniqueId());
  await store.set(key, id);
  return id;
}

function ncclError(
  lib: LibNccl,
  api: string,
  result: NcclResult,
  comm: bigint,
  who: string,
): CollectiveError {
  const detail = lib.ncclGetLastError(comm);
  return new CollectiveError(
    `${who}: ${lib.ncclGetErrorString(result)} (ncclResult ${result})${detail ? `: ${detail}` : ''}`,
    { operation: api },
  );
}

function check(lib: LibNccl, api: string, result: NcclResult): void {
  if (result !== NCCL_RESULT.success) throw ncclError(lib, api, result, 0n, 'NCCL');
}

function checked<T>(lib: LibNccl, api: string, out: { status: NcclResult; value: T }): T {
  check(lib, api, out.status);
  return out.value;
}
