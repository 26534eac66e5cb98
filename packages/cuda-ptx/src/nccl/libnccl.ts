import { BackendUnavailableError } from '@rayo/core';
import {
  firstLine,
  type Koffi,
  loadedOnce,
  type NativeFn,
  type NativeLibrary,
  openNativeLibrary,
} from '../driver/nativeLibrary.js';

/**
 * The NCCL functions rayo calls, as plain TypeScript functions in the style of
 * `LibCuda`: communicators, device pointers and streams are bigints, results
 * are `ncclResult_t` codes, out-parameters come back as `{ status, value }`.
 * The koffi binding below implements it over `libnccl.so.2`; tests use a fake.
 */

export type NcclResult = number;

export interface NcclOut<T> {
  readonly status: NcclResult;
  readonly value: T;
}

/** `ncclResult_t` (nccl.h). */
export const NCCL_RESULT = {
  success: 0,
  unhandledCudaError: 1,
  systemError: 2,
  internalError: 3,
  invalidArgument: 4,
  invalidUsage: 5,
  remoteError: 6,
  inProgress: 7,
} as const;

/** `ncclDataType_t` (nccl.h). */
export const NCCL_DATA_TYPE = { int32: 2, uint32: 3, float16: 6, float32: 7, bfloat16: 9 } as const;

/** `ncclRedOp_t` (nccl.h). */
export const NCCL_RED_OP = { sum: 0, prod: 1, max: 2, min: 3, avg: 4 } as const;

/** Bytes of an `ncclUniqueId`. */
export const NCCL_UNIQUE_ID_BYTES = 128;

export interface LibNccl {
  readonly path: string;
  /** e.g. 22304 for 2.23.4. */
  ncclGetVersion(): NcclOut<number>;
  ncclGetUniqueId(): NcclOut<Uint8Array>;
  /**
   * A non-blocking communicator (`ncclConfig_t.blocking = 0`): it returns at
   * once, usually with `inProgress`; `ncclCommGetAsyncError` says when it is ready.
   */
  ncclCommInitRankNonBlocking(nranks: number, id: Uint8Array, rank: number): NcclOut<bigint>;
  ncclCommGetAsyncError(comm: bigint): NcclOut<NcclResult>;
  ncclCommAbort(comm: bigint): NcclResult;
  ncclCommFinalize(comm: bigint): NcclResult;
  ncclCommDestroy(comm: bigint): NcclResult;
  ncclGetErrorString(result: NcclResult): string;
  /** The library's last error message (for `comm`, or of the process when 0n). */
  ncclGetLastError(comm: bigint): string;
  ncclGroupStart(): NcclResult;
  ncclGroupEnd(): NcclResult;
  ncclAllReduce(
    send: bigint,
    recv: bigint,
    count: number,
    dtype: number,
    op: number,
    comm: bigint,
    stream: bigint,
  ): NcclResult;
  ncclBroadcast(
    send: bigint,
    recv: bigint,
    count: number,
    dtype: number,
    root: number,
    comm: bigint,
    stream: bigint,
  ): NcclResult;
  ncclAllGather(
    send: bigint,
    recv: bigint,
    sendCount: number,
    dtype: number,
    comm: bigint,
    stream: bigint,
  ): NcclResult;
  ncclReduceScatter(
    send: bigint,
    recv: bigint,
    recvCount: number,
    dtype: number,
    op: number,
    comm: bigint,
    stream: bigint,
  ): NcclResult;
}

// ncclConfig_t as of NCCL 2.14 (the first with non-blocking communicators);
// later versions read only the fields that the declared version has.
const CONFIG_VERSION_2_14 = 21400;
const CONFIG_MAGIC = 0xcafebeef;
const CONFIG_UNDEF_INT = -2147483648;

/**
 * Loads NCCL through koffi (`libnccl.so.2` from the system library path by
 * default). Throws BackendUnavailableError with the reason when it cannot be
 * loaded or is older than 2.14.
 */
export async function loadLibNccl(path = 'libnccl.so.2'): Promise<LibNccl> {
  const { koffi, library } = await openNativeLibrary(
    path,
    'loadLibNccl',
    'is NCCL installed in the system library path?',
  );
  return bindLibNccl(koffi, library, path);
}

/** NCCL from the default location, loaded once per process (a failure is retried next time). */
export const libNccl: () => Promise<LibNccl> = loadedOnce(() => loadLibNccl());

function bindLibNccl(koffi: Koffi, library: NativeLibrary, path: string): LibNccl {
  const fn = (name: string, result: string, args: unknown[]): NativeFn => {
    try {
      return library.func(name, result, args as never) as NativeFn;
    } catch (error) {
      throw new BackendUnavailableError(
        `${path} lacks ${name} (NCCL 2.14 or newer is needed): ${firstLine(error)}`,
        {
          operation: 'loadLibNccl',
          cause: error,
        },
      );
    }
  };
  const uniqueId = koffi.struct('ncclUniqueId', {
    internal: koffi.array('uint8_t', NCCL_UNIQUE_ID_BYTES, 'Typed'),
  });
  const config = koffi.struct('ncclConfig_v21400', {
    size: 'size_t',
    magic: 'uint',
    version: 'uint',
    blocking: 'int',
    cgaClusterSize: 'int',
    minCTAs: 'int',
    maxCTAs: 'int',
    netName: 'const char *',
  });
  const outPtr = koffi.out(koffi.pointer('void *'));
  const outInt = koffi.out(koffi.pointer('int'));
  const collective = ['void *', 'void *', 'size_t', 'int'];
  const f = {
    getVersion: fn('ncclGetVersion', 'int', [outInt]),
    getUniqueId: fn('ncclGetUniqueId', 'int', [koffi.out(koffi.pointer(uniqueId))]),
    initRankConfig: fn('ncclCommInitRankConfig', 'int', [
      outPtr,
      'int',
      uniqueId,
      'int',
      koffi.pointer(config),
    ]),
    getAsyncError: fn('ncclCommGetAsyncError', 'int', ['void *', outInt]),
    abort: fn('ncclCommAbort', 'int', ['void *']),
    finalize: fn('ncclCommFinalize', 'int', ['void *']),
    destroy: fn('ncclCommDestroy', 'int', ['void *']),
    errorString: fn('ncclGetErrorString', 'const char *', ['int']),
    lastError: fn('ncclGetLastError', 'const char *', ['void *']),
    groupStart: fn('ncclGroupStart', 'int', []),
    groupEnd: fn('ncclGroupEnd', 'int', []),
    allReduce: fn('ncclAllReduce', 'int', [...collective, 'int', 'void *', 'void *']),
    broadcast: fn('ncclBroadcast', 'int', [...collective, 'int', 'void *', 'void *']),
    allGather: fn('ncclAllGather', 'int', [...collective, 'void *', 'void *']),
    reduceScatter: fn('ncclReduceScatter', 'int', [...collective, 'int', 'void *', 'void *']),
  };
  // Device pointers, streams and communicators travel as bigints; koffi takes them for 'void *' as is.
  const ptr = (v: bigint): unknown => (v === 0n ? null : v);
  const handle = (v: unknown): bigint => (v === null || v === undefined ? 0n : BigInt(v as bigint));
  return {
    path,
    ncclGetVersion() {
      const out = [0];
      const status = f.getVersion(out) as number;
      return { status, value: out[0]! };
    },
    ncclGetUniqueId() {
      const out: [{ internal: Uint8Array }] = [{ internal: new Uint8Array(NCCL_UNIQUE_ID_BYTES) }];
      const status = f.getUniqueId(out) as number;
      return { status, value: Uint8Array.from(out[0].internal) };
    },
    ncclCommInitRankNonBlocking(nranks, id, rank) {
      const out: unknown[] = [null];
      const cfg = {
        size: koffi.sizeof(config),
        magic: CONFIG_MAGIC,
        version: CONFIG_VERSION_2_14,
        blocking: 0,
        cgaClusterSize: CONFIG_UNDEF_INT,
        minCTAs: CONFIG_UNDEF_INT,
        maxCTAs: CONFIG_UNDEF_INT,
        netName: null,
      };
      const status = f.initRankConfig(out, nranks, { internal: id }, rank, cfg) as number;
      return { status, value: handle(out[0]) };
    },
    ncclCommGetAsyncError(comm) {
      const out = [0];
      const status = f.getAsyncError(ptr(comm), out) as number;
      return { status, value: out[0]! };
    },
    ncclCommAbort: (comm) => f.abort(ptr(comm)) as number,
    ncclCommFinalize: (comm) => f.finalize(ptr(comm)) as number,
    ncclCommDestroy: (comm) => f.destroy(ptr(comm)) as number,
    ncclGetErrorString: (result) => (f.errorString(result) as string | null) ?? `ncclResult ${result}`,
    ncclGetLastError: (comm) => (f.lastError(ptr(comm)) as string | null) ?? '',
    ncclGroupStart: () => f.groupStart() as number,
    ncclGroupEnd: () => f.groupEnd() as number,
    ncclAllReduce: (send, recv, count, dtype, op, comm, stream) =>
      f.allReduce(ptr(send), ptr(recv), count, dtype, op, ptr(comm), ptr(stream)) as number,
    ncclBroadcast: (send, recv, count, dtype, root, comm, stream) =>
      f.broadcast(ptr(send), ptr(recv), count, dtype, root, ptr(comm), ptr(stream)) as number,
    ncclAllGather: (send, recv, count, dtype, comm, stream) =>
      f.allGather(ptr(send), ptr(recv), count, dtype, ptr(comm), ptr(stream)) as number,
    ncclReduceScatter: (send, recv, count, dtype, op, comm, stream) =>
      f.reduceScatter(ptr(send), ptr(recv), count, dtype, op, ptr(comm), ptr(stream)) as number,
  };
}
