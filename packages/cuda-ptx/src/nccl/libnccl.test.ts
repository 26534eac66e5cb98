import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { BackendUnavailableError } from '@rayo/core';
import { buildNativeFake, type NativeFake, nativeFakeGate } from '@rayo/cuda-testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type LibNccl, loadLibNccl, NCCL_DATA_TYPE, NCCL_RED_OP, NCCL_RESULT } from './libnccl.js';

describe('loading NCCL', () => {
  it('reports a library that cannot be loaded as BackendUnavailableError with the reason', async () => {
    const missing = join(tmpdir(), 'rayo-no-such-dir', 'libnccl.so.2');
    const error = await loadLibNccl(missing).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(BackendUnavailableError);
    expect((error as Error).message).toContain(`could not load ${missing} (is NCCL installed`);
  });
});

// The binding is checked against a C library with NCCL's signatures, built
// here with the system C compiler where one exists (as libcuda's is).
const gate = nativeFakeGate();

describe.skipIf(gate.skip)(`the koffi binding against a native fake libnccl (${gate.reason})`, () => {
  let fake: NativeFake | undefined;
  let lib: LibNccl;
  let log: () => string;

  beforeAll(async () => {
    fake = buildNativeFake('libnccl');
    lib = await loadLibNccl(fake.path);
    const koffi = (await import('koffi')).default;
    log = koffi.load(fake.path).func('const char *fake_nccl_log(void)') as () => string;
  });
  afterAll(() => {
    fake?.dispose();
  });

  it('passes the unique id by value and a non-blocking ncclConfig_t', () => {
    expect(lib.ncclGetVersion()).toEqual({ status: 0, value: 22304 });
    const id = lib.ncclGetUniqueId();
    expect(id.status).toBe(0);
    expect(id.value).toHaveLength(128);
    expect([id.value[0], id.value[1], id.value[127]]).toEqual([1, 4, (127 * 3 + 1) & 0xff]);
    const init = lib.ncclCommInitRankNonBlocking(2, id.value, 1);
    expect(init).toEqual({ status: NCCL_RESULT.inProgress, value: 0xc0ffeen });
    expect(log()).toContain(
      `init nranks=2 rank=1 id[0]=1 id[127]=${(127 * 3 + 1) & 0xff} blocking=0 config=ok`,
    );
    expect(lib.ncclCommGetAsyncError(init.value)).toEqual({ status: 0, value: NCCL_RESULT.inProgress });
    expect(lib.ncclCommGetAsyncError(init.value)).toEqual({ status: 0, value: NCCL_RESULT.success });
  });

  it('passes device pointers, counts, types, operations and the stream of each collective', () => {
    const comm = 0xc0ffeen;
    const { float32, int32 } = NCCL_DATA_TYPE;
    expect(lib.ncclGroupStart()).toBe(0);
    expect(
      lib.ncclAllReduce(0x7f0000001000n, 0x7f0000001000n, 5, float32, NCCL_RED_OP.avg, comm, 0xabcn),
    ).toBe(0);
    expect(lib.ncclGroupEnd()).toBe(0);
    expect(lib.ncclBroadcast(0x2000n, 0x2000n, 3_000_000_000, int32, 1, comm, 0n)).toBe(0);
    expect(lib.ncclAllGather(0x3000n, 0x4000n, 7, float32, comm, 0xabcn)).toBe(0);
    expect(lib.ncclReduceScatter(0x4000n, 0x3000n, 7, float32, NCCL_RED_OP.max, comm, 0xabcn)).toBe(0);
    const lines = log().split('\n');
    expect(lines).toContain(
      'allReduce send=0x7f0000001000 recv=0x7f0000001000 count=5 dtype=7 extra=4 comm=0xc0ffee stream=0xabc',
    );
    expect(lines).toContain(
      'broadcast send=0x2000 recv=0x2000 count=3000000000 dtype=2 extra=1 comm=0xc0ffee stream=(nil)',
    );
    expect(lines).toContain(
      'allGather send=0x3000 recv=0x4000 count=7 dtype=7 extra=-1 comm=0xc0ffee stream=0xabc',
    );
    expect(lines).toContain(
      'reduceScatter send=0x4000 recv=0x3000 count=7 dtype=7 extra=2 comm=0xc0ffee stream=0xabc',
    );
    expect(lines.indexOf('groupStart')).toBeLessThan(lines.findIndex((l) => l.startsWith('allReduce')));
  });

  it('reads NCCL’s error string and last error', () => {
    expect(lib.ncclAllReduce(0x1000n, 0x1000n, 0, NCCL_DATA_TYPE.float32, 0, 0xc0ffeen, 0n)).toBe(4);
    expect(lib.ncclGetErrorString(4)).toBe('invalid argument');
    expect(lib.ncclGetLastError(0xc0ffeen)).toBe('allReduce: count must be positive');
    expect([
      lib.ncclCommFinalize(0xc0ffeen),
      lib.ncclCommDestroy(0xc0ffeen),
      lib.ncclCommAbort(0xc0ffeen),
    ]).toEqual([0, 0, 0]);
  });
});
