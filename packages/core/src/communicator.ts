import type { Backend, Tensor } from './backend.js';
import { DTypeError, InvalidArgumentError, RayoError, ShapeError } from './errors.js';
import { copy } from './kernels/memory.js';
import { formatShape } from './shape.js';

/**
 * A collective failed (the library's message says why), timed out, or was
 * called after the communicator was aborted or disposed.
 */
export class CollectiveError extends RayoError {}

/** How an all-reduce or reduce-scatter combines the ranks' values. */
export type ReduceOp = 'sum' | 'avg' | 'max' | 'min' | 'prod';

export const REDUCE_OPS: readonly ReduceOp[] = ['sum', 'avg', 'max', 'min', 'prod'];

/**
 * A point in the order of a communicator's overlapped collectives
 * (`markOverlapped`): joining it orders later backend work after the
 * overlapped collectives issued before it, not after later ones.
 */
export interface OverlapMark {
  readonly index: number;
  /** How many full joins came before it: a mark older than the last full join is already joined. */
  readonly round: number;
}

/** How a collective is ordered with the backend's other work. */
export interface CollectiveOptions {
  /**
   * Overlap the collective with later backend work (default false): it still
   * starts after everything already enqueued on the backend's queue, but
   * kernels, copies and reads enqueued after it do not wait for it, until
   * `joinOverlapped()`. Meanwhile its tensors belong to the collective: later
   * work must neither read nor write them, and a read or `backend.sync()`
   * does not wait for it. Overlapped collectives run in the order they were
   * issued, as every collective does.
   */
  readonly overlap?: boolean;
}

/**
 * Collective operations over a group of ranks, one process (or device) per
 * rank. Every operation is enqueued on the backend's queue/stream in order
 * with kernels and returns without waiting; a later read, `sync()` or
 * `barrier()` waits. An all-reduce, all-gather or reduce-scatter may instead be overlapped with later
 * backend work (`{ overlap: true }`, e.g. gradients all-reduced while backward
 * goes on), until `joinOverlapped()`. Every rank must call the same operations in the same
 * order with tensors of the same shapes and dtypes.
 */
export interface Communicator {
  readonly rank: number;
  readonly size: number;
  /** The backend whose tensors the collectives take. */
  readonly backend: Backend;
  /** The error that aborted the communicator (a peer died, a timeout), if one did: results since are meaningless. */
  readonly failure: Error | undefined;
  /** Reduces each tensor across the ranks, in place (issued together where the library can fuse them). */
  allReduce(tensors: readonly Tensor[], op?: ReduceOp, options?: CollectiveOptions): void;
  /**
   * Orders everything enqueued on the backend from now on after every
   * overlapped collective issued so far (returns at once, waits for nothing
   * on the host), or with `mark` only after those issued before the mark.
   * Call it before the overlapped tensors are used or read. Every
   * collective issued without `overlap`, `barrier()` and `dispose()` join
   * everything first, so the ranks' collectives stay in one order; marks
   * made before such a full join are spent by it.
   */
  joinOverlapped(mark?: OverlapMark): void;
  /**
   * A mark after the overlapped collectives issued so far, for a partial
   * `joinOverlapped(mark)` (e.g. a bucket of parameters gathered while the
   * next forward uses the ones gathered before); undefined when nothing is
   * pending or the collectives do not overlap.
   */
  markOverlapped(): OverlapMark | undefined;
  /** Overwrites each rank's `tensor` with rank `root`'s. */
  broadcast(tensor: Tensor, root?: number): void;
  /** `output` (size·n elements) gets every rank's `input` (n elements), rank r's at offset r·n; may be overlapped as `allReduce`. */
  allGather(input: Tensor, output: Tensor, options?: CollectiveOptions): void;
  /** Reduces `input` (size·n elements) across the ranks; rank r's `output` (n elements) gets block r; may be overlapped as `allReduce`. */
  reduceScatter(input: Tensor, output: Tensor, op?: ReduceOp, options?: CollectiveOptions): void;
  /** Resolves once every rank has reached it and this rank's enqueued collectives have completed. */
  barrier(): Promise<void>;
  /** Stops every pending collective of this rank so that nothing waits forever; the communicator is unusable afterwards. */
  abort(reason?: string): void;
  /** Waits for pending collectives and releases the communicator. */
  dispose(): Promise<void>;
}

/**
 * Where ranks exchange the few bytes a communicator needs before it exists
 * (e.g. NCCL's unique id): a key-value store that every rank reaches.
 */
export interface RendezvousStore {
  set(key: string, value: Uint8Array): Promise<void>;
  /** Waits until the key is set, up to the store's timeout. */
  get(key: string): Promise<Uint8Array>;
  close(): Promise<void>;
}

/** Validates the arguments every communicator checks the same way (shapes, dtypes, backend, root, op). */
export const collectiveChecks = {
  op(api: string, op: string): ReduceOp {
    if (!(REDUCE_OPS as readonly string[]).includes(op)) {
      throw new InvalidArgumentError('unknown reduce operation', {
        operation: api,
        argument: 'op',
        expected: REDUCE_OPS.join(' | '),
        actual: String(op),
      });
    }
    return op as ReduceOp;
  },
  root(api: string, root: number, size: number): void {
    if (!Number.isInteger(root) || root < 0 || root >= size) {
      throw new InvalidArgumentError('root is not a rank of the communicator', {
        operation: api,
        argument: 'root',
        expected: `an integer in [0, ${size})`,
        actual: String(root),
      });
    }
  },
  backend(api: string, argument: string, tensor: Tensor, backend: Backend): void {
    if (tensor.backend !== backend) {
      throw new InvalidArgumentError("the tensor belongs to another backend than the communicator's", {
        operation: api,
        argument,
        expected: backend.name,
        actual: tensor.backend.name,
      });
    }
  },
  /**
   * Whether `part` is exactly rank `rank`'s block of `whole` in the same
   * memory: an all-gather or reduce-scatter in place, as NCCL defines it.
   * Otherwise the two must not share memory.
   */
  inPlace(api: string, part: Tensor, whole: Tensor, rank: number): boolean {
    if (!part.overlaps(whole)) return false;
    if (part.base === whole.base && part.baseOffset === whole.baseOffset + rank * part.size) return true;
    throw new InvalidArgumentError('the per-rank tensor overlaps the whole one other than as its own block', {
      operation: api,
      argument: 'output',
      expected: `memory apart from each other, or the per-rank tensor exactly rank ${rank}'s block of the whole one (in place)`,
      actual: `elements ${part.baseOffset}… of a base whose whole tensor starts at ${whole.baseOffset}`,
    });
  },
  /** `whole` must hold `size` blocks of `part` (same dtype). */
  blocks(api: string, part: Tensor, whole: Tensor, wholeName: string, size: number): void {
    if (whole.dtype !== part.dtype) {
      throw new DTypeError('the two tensors of a collective must share a dtype', {
        operation: api,
        argument: wholeName,
        expected: part.dtype,
        actual: whole.dtype,
      });
    }
    if (whole.size !== part.size * size) {
      throw new ShapeError(`must hold ${size} blocks (one per rank) of the per-rank tensor`, {
        operation: api,
        argument: wholeName,
        expected: `${part.size * size} elements`,
        actual: `${whole.size} elements (${formatShape(whole.shape)})`,
      });
    }
  },
};

/**
 * The communicator of a group of one: every collective is the identity (a
 * copy where input and output differ), on any backend. A program written for
 * data parallelism runs unchanged on one device with it.
 */
export class SingleRankCommunicator implements Communicator {
  readonly rank = 0;
  readonly size = 1;
  readonly failure = undefined;
  #aborted: string | undefined;

  constructor(readonly backend: Backend) {}

  /** The identity; `overlap` changes nothing, since nothing moves. */
  allReduce(tensors: readonly Tensor[], op: ReduceOp = 'sum', _options?: CollectiveOptions): void {
    this.#alive('allReduce');
    collectiveChecks.op('allReduce', op);
    tensors.forEach((t, i) => {
      collectiveChecks.backend('allReduce', `tensors[${i}]`, t, this.backend);
    });
  }

  joinOverlapped(_mark?: OverlapMark): void {}

  markOverlapped(): OverlapMark | undefined {
    return undefined;
  }

  broadcast(tensor: Tensor, root = 0): void {
    this.#alive('broadcast');
    collectiveChecks.root('broadcast', root, 1);
    collectiveChecks.backend('broadcast', 'tensor', tensor, this.backend);
  }

  allGather(input: Tensor, output: Tensor, _options?: CollectiveOptions): void {
    this.#alive('allGather');
    this.#copy('allGather', input, output);
  }

  reduceScatter(input: Tensor, output: Tensor, op: ReduceOp = 'sum', _options?: CollectiveOptions): void {
    this.#alive('reduceScatter');
    collectiveChecks.op('reduceScatter', op);
    this.#copy('reduceScatter', input, output);
  }

  async barrier(): Promise<void> {
    this.#alive('barrier');
    await this.backend.sync();
  }

  abort(reason = 'aborted'): void {
    this.#aborted ??= reason;
  }

  async dispose(): Promise<void> {
    if (this.#aborted === undefined) await this.backend.sync();
    this.#aborted ??= 'disposed';
  }

  #copy(api: string, input: Tensor, output: Tensor): void {
    collectiveChecks.backend(api, 'input', input, this.backend);
    collectiveChecks.backend(api, 'output', output, this.backend);
    collectiveChecks.blocks(api, input, output, 'output', 1);
    if (
      collectiveChecks.inPlace(
        api,
        api === 'allGather' ? input : output,
        api === 'allGather' ? output : input,
        0,
      )
    )
      return;
    this.backend.run(copy, [input], {}, { out: [output.reshape(input.shape)] });
  }

  #alive(api: string): void {
    if (this.#aborted !== undefined) {
      throw new CollectiveError(`the communicator was ${this.#aborted}`, {
        operation: api,
        expected: 'a live communicator',
        actual: this.#aborted,
      });
    }
  }
}
