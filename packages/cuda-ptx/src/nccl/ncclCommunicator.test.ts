import {
  CollectiveError,
  DTypeError,
  InvalidArgumentError,
  type RendezvousStore,
  ShapeError,
} from '@rayo/core';
import { CollectiveLibCuda, FakeNccl } from '@rayo/cuda-testkit';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { CudaBackend } from '../backend.js';
import { CudaDriver } from '../driver/driver.js';
import { NcclCommunicator, type NcclCommunicatorOptions } from './ncclCommunicator.js';

type Extra = Partial<Omit<NcclCommunicatorOptions, 'backend' | 'rank' | 'size'>>;

const opened: NcclCommunicator[] = [];

async function group(size: number, extra: Extra = {}) {
  const cuda = new CollectiveLibCuda();
  const nccl = new FakeNccl(cuda);
  const backends = Array.from({ length: size }, () => new CudaBackend(new CudaDriver(cuda)));
  const comms = await NcclCommunicator.createGroup(backends, { lib: nccl, abortOnSignals: false, ...extra });
  opened.push(...comms);
  return { cuda, nccl, backends, comms };
}

afterEach(() => {
  for (const c of opened.splice(0)) c.abort('test over');
});

/** A store in memory whose `get` waits for the `set`. */
function memoryStore(): RendezvousStore {
  const values = new Map<string, Uint8Array>();
  const waiters = new Map<string, ((v: Uint8Array) => void)[]>();
  return {
    async set(key, value) {
      values.set(key, value);
      for (const w of waiters.get(key) ?? []) w(value);
    },
    get(key) {
      const v = values.get(key);
      if (v) return Promise.resolve(v);
      return new Promise((resolve) => waiters.set(key, [...(waiters.get(key) ?? []), resolve]));
    },
    async close() {},
  };
}

describe('NcclCommunicator over the fake NCCL', () => {
  it('all-reduces several tensors in place with sum, avg and max', async () => {
    const { backends, comms } = await group(2);
    const xs = backends.map((b, r) => b.upload([1 + r, 2 * r, -3], [3]));
    const ks = backends.map((b, r) => b.upload(new Int32Array([r + 1, 10 * r]), [2], 'i32'));
    comms.forEach((c, r) => {
      c.allReduce([xs[r]!, ks[r]!], 'sum');
    });
    expect(Array.from(await xs[0]!.read())).toEqual([3, 2, -6]);
    expect(Array.from(await xs[1]!.read())).toEqual([3, 2, -6]);
    expect(Array.from(await ks[1]!.read())).toEqual([3, 10]);

    comms.forEach((c, r) => {
      c.allReduce([xs[r]!], 'avg');
    });
    expect(Array.from(await xs[1]!.read())).toEqual([3, 2, -6]);
    const ys = backends.map((b, r) => b.upload([r, 5 - r], [2]));
    comms.forEach((c, r) => {
      c.allReduce([ys[r]!], 'max');
    });
    expect(Array.from(await ys[0]!.read())).toEqual([1, 5]);
  });

  it('averages gradients of three ranks', async () => {
    const { backends, comms } = await group(3);
    const gs = backends.map((b, r) => b.upload([r, 3 * r], [2]));
    comms.forEach((c, r) => {
      c.allReduce([gs[r]!], 'avg');
    });
    for (const g of gs) expect(Array.from(await g.read())).toEqual([1, 3]);
  });

  it('broadcasts from any root, gathers and reduce-scatters', async () => {
    const { backends, comms } = await group(2);
    const w = backends.map((b, r) => b.upload([r + 5, r + 6], [2]));
    comms.forEach((c, r) => {
      c.broadcast(w[r]!, 1);
    });
    expect(Array.from(await w[0]!.read())).toEqual([6, 7]);

    const parts = backends.map((b, r) => b.upload([r, r + 0.5], [2]));
    const gathered = backends.map((b) => b.upload(new Float32Array(4), [2, 2]));
    comms.forEach((c, r) => {
      c.allGather(parts[r]!, gathered[r]!);
    });
    expect(Array.from(await gathered[1]!.read())).toEqual([0, 0.5, 1, 1.5]);

    const wholes = backends.map((b, r) =>
      b.upload(
        [1, 2, 3, 4].map((v) => v * (r + 1)),
        [4],
      ),
    );
    const blocks = backends.map((b) => b.upload(new Float32Array(2), [2]));
    comms.forEach((c, r) => {
      c.reduceScatter(wholes[r]!, blocks[r]!, 'sum');
    });
    expect(Array.from(await blocks[0]!.read())).toEqual([3, 6]);
    expect(Array.from(await blocks[1]!.read())).toEqual([9, 12]);
  });

  it('keeps stream order: a collective waits for its peers, and later work waits for it', async () => {
    const { cuda, backends, comms } = await group(2);
    const xs = backends.map((b, r) => b.upload([r + 1], [1]));
    comms[0]!.allReduce([xs[0]!]);
    // Enqueued behind the waiting collective: it must see the reduced value, not the old one.
    const reading = xs[0]!.read();
    expect(cuda.cuStreamQuery(backends[0]!.stream)).toBe(600);
    comms[1]!.allReduce([xs[1]!]);
    expect(cuda.cuStreamQuery(backends[0]!.stream)).toBe(0);
    expect(Array.from(await reading)).toEqual([3]);
  });

  it('overlaps an all-reduce with later work of the backend until joinOverlapped', async () => {
    const { cuda, backends, comms } = await group(2);
    const [b0, b1] = backends as [CudaBackend, CudaBackend];
    const xs = backends.map((b, r) => b.upload([r + 1, 10], [2]));
    const later = b0.upload([7], [1]);
    comms[0]!.allReduce([xs[0]!], 'sum', { overlap: true });
    // The collective waits for rank 1 on the communicator's stream; the backend's stream goes on.
    expect(cuda.cuStreamQuery(b0.stream)).toBe(0);
    b0.write(later, [8]);
    expect(Array.from(await later.read())).toEqual([8]);
    comms[0]!.joinOverlapped();
    // From the join on, the backend's work waits for the collective.
    expect(cuda.cuStreamQuery(b0.stream)).toBe(600);
    const reading = xs[0]!.read();
    comms[1]!.allReduce([xs[1]!], 'sum', { overlap: true });
    comms[1]!.joinOverlapped();
    expect(cuda.cuStreamQuery(b0.stream)).toBe(0);
    expect(Array.from(await reading)).toEqual([3, 20]);
    expect(Array.from(await xs[1]!.read())).toEqual([3, 20]);
    // Made once, ordering only: no timestamps to record.
    const waits = cuda.calls.filter((c) => c.startsWith('cuStreamWaitEvent'));
    expect(waits.length).toBeGreaterThanOrEqual(4);
    expect(cuda.calls.filter((c) => c.startsWith('cuStreamCreate'))).toHaveLength(4);
    expect([...cuda.eventFlags.values()].filter((f) => f === 2).length).toBeGreaterThanOrEqual(6);
    b1.write(xs[1]!, [0, 0]);
    expect(Array.from(await xs[1]!.read())).toEqual([0, 0]);
  });

  it('overlaps a reduce-scatter and an all-gather as it does an all-reduce', async () => {
    const { cuda, backends, comms } = await group(2);
    const b0 = backends[0]!;
    const wholes = backends.map((b, r) => b.upload([1 + r, 2 + r, 3 + r, 4 + r], [4]));
    const blocks = backends.map((b) => b.upload(new Float32Array(2), [2]));
    const gathered = backends.map((b) => b.upload(new Float32Array(4), [4]));
    comms[0]!.reduceScatter(wholes[0]!, blocks[0]!, 'sum', { overlap: true });
    comms[0]!.allGather(blocks[0]!, gathered[0]!, { overlap: true });
    // Both wait for rank 1 on the communicator's stream; the backend's stream goes on.
    expect(cuda.cuStreamQuery(b0.stream)).toBe(0);
    comms[0]!.joinOverlapped();
    expect(cuda.cuStreamQuery(b0.stream)).toBe(600);
    const reading = gathered[0]!.read();
    comms[1]!.reduceScatter(wholes[1]!, blocks[1]!, 'sum', { overlap: true });
    comms[1]!.allGather(blocks[1]!, gathered[1]!, { overlap: true });
    comms[1]!.joinOverlapped();
    expect(Array.from(await reading)).toEqual([3, 5, 7, 9]);
    expect(Array.from(await gathered[1]!.read())).toEqual([3, 5, 7, 9]);
  });

  it('starts an overlapped all-reduce after the work enqueued before it, and joins before any other collective', async () => {
    const { backends, comms } = await group(2);
    const xs = backends.map((b, r) => b.upload([r + 1], [1]));
    const ys = backends.map((b, r) => b.upload([10 * r], [1]));
    comms.forEach((c, r) => {
      // Written on the backend's stream just before: the collective must see it.
      backends[r]!.write(xs[r]!, [r + 2]);
      c.allReduce([xs[r]!], 'sum', { overlap: true });
      // Not overlapped: it joins first, so reading ys also waits for xs.
      c.allReduce([ys[r]!], 'sum');
    });
    expect(Array.from(await xs[0]!.read())).toEqual([5]);
    expect(Array.from(await ys[1]!.read())).toEqual([10]);
    await Promise.all(comms.map((c) => c.barrier()));
    await Promise.all(comms.map((c) => c.dispose()));
  });

  it('aborts an overlapped collective that a peer never joins after the timeout', async () => {
    const failures: CollectiveError[] = [];
    const { backends, comms } = await group(2, {
      timeoutMs: 30,
      pollMs: 2,
      onFailure: (e) => failures.push(e),
    });
    comms[0]!.allReduce([backends[0]!.upload([1], [1])], 'sum', { overlap: true });
    // Nothing waits for it on the backend's stream: only the watchdog can see it stall.
    // Rank 0 times out and aborts; its abort reaches rank 1 as a remote error.
    await vi.waitFor(() => expect(failures).toHaveLength(2));
    expect(failures[0]!.message).toMatch(/rank 0 of 2: a collective did not complete within 30 ms/);
    expect(failures[1]!.message).toMatch(/rank 1 of 2: remote process exited/);
    expect(() => comms[0]!.joinOverlapped()).not.toThrow();
  });

  it('rejects tensors that do not fit, naming the argument', async () => {
    const { backends, comms } = await group(2);
    const other = new CudaBackend(new CudaDriver(new CollectiveLibCuda()));
    const x = backends[0]!.upload([1, 2], [2]);
    expect(() => comms[0]!.allReduce([other.upload([1], [1])])).toThrow(
      /tensors\[0\].*belongs to another backend/,
    );
    expect(() => comms[0]!.allReduce([x], 'mean' as 'sum')).toThrow(InvalidArgumentError);
    expect(() => comms[0]!.broadcast(x, 2)).toThrow(/root.*expected an integer in \[0, 2\)/);
    const wrongSize = backends[0]!.upload(new Float32Array(3), [3]);
    expect(() => comms[0]!.allGather(x, wrongSize)).toThrow(ShapeError);
    // The per-rank tensor may be this rank's block of the whole one (in place), nothing else of it.
    const whole = backends[0]!.upload(new Float32Array(4), [4]);
    expect(() => comms[0]!.allGather(whole.slice(1, 2), whole)).toThrow(/other than as its own block/);
    expect(() => comms[0]!.reduceScatter(whole, whole.slice(2, 2))).toThrow(
      /exactly rank 0's block of the whole one/,
    );
    expect(() => comms[0]!.allGather(x, x.reshape([1, 2]))).toThrow(ShapeError);
    const ints = backends[0]!.upload(new Int32Array(4), [4], 'i32');
    expect(() => comms[0]!.allGather(x, ints)).toThrow(DTypeError);
  });

  it('exchanges the unique id through a rendezvous store', async () => {
    const cuda = new CollectiveLibCuda();
    const nccl = new FakeNccl(cuda);
    const store = memoryStore();
    const comms = await Promise.all(
      [1, 0].map((rank) =>
        NcclCommunicator.create({
          backend: new CudaBackend(new CudaDriver(cuda)),
          rank,
          size: 2,
          store,
          lib: nccl,
          abortOnSignals: false,
        }),
      ),
    );
    opened.push(...comms);
    await Promise.all(comms.map((c) => c.barrier()));
    expect(nccl.calls.filter((c) => c.startsWith('ncclAllReduce'))).toHaveLength(2);
  });

  it('fails initialisation with a clear error when a rank never joins', async () => {
    const cuda = new CollectiveLibCuda();
    const nccl = new FakeNccl(cuda);
    const alone = NcclCommunicator.create({
      backend: new CudaBackend(new CudaDriver(cuda)),
      rank: 0,
      size: 2,
      uniqueId: nccl.ncclGetUniqueId().value,
      lib: nccl,
      timeoutMs: 20,
      abortOnSignals: false,
    });
    await expect(alone).rejects.toThrow(/rank 0 of 2: the other ranks did not join within 20 ms/);
    expect(nccl.calls).toContain('ncclCommAbort(rank 0)');
  });

  it('turns a peer abort into a CollectiveError with NCCL’s message on the other rank', async () => {
    const failures: CollectiveError[] = [];
    const { comms } = await group(2, { pollMs: 2, onFailure: (e) => failures.push(e) });
    comms[1]!.abort('killed');
    const barrier = comms[0]!.barrier();
    await expect(barrier).rejects.toThrow(CollectiveError);
    await expect(barrier).rejects.toThrow(/remote process exited or there was a network error/);
    expect(() => comms[0]!.allReduce([])).toThrow(/remote process exited/);
    expect(() => comms[1]!.broadcast(comms[1]!.backend.upload([1], [1]))).toThrow(/aborted \(killed\)/);
  });

  it('aborts a collective that a peer never joins after the timeout', async () => {
    const failures: CollectiveError[] = [];
    const { nccl, backends, comms } = await group(2, {
      timeoutMs: 30,
      pollMs: 2,
      onFailure: (e) => failures.push(e),
    });
    const x = backends[0]!.upload([1], [1]);
    comms[0]!.allReduce([x]);
    await expect(comms[0]!.barrier()).rejects.toThrow(/a collective did not complete within 30 ms/);
    expect(failures).toHaveLength(1);
    expect(nccl.calls).toContain('ncclCommAbort(rank 0)');
    // The peer learns of it from NCCL, not from its own timeout.
    await expect(comms[1]!.barrier()).rejects.toThrow(/remote process exited/);
  });

  it('times a collective from when it was enqueued, not from an earlier one that finished unseen', async () => {
    vi.useFakeTimers({ toFake: ['setInterval', 'clearInterval', 'performance'] });
    try {
      const failures: CollectiveError[] = [];
      const { backends, comms } = await group(2, {
        timeoutMs: 40,
        pollMs: 50,
        onFailure: (e) => failures.push(e),
      });
      const xs = backends.map((b) => b.upload([1], [1]));
      for (const [r, c] of comms.entries()) c.allReduce([xs[r]!]);
      // Finished, but the watchdog has not looked since: 45 ms later the next one starts.
      vi.advanceTimersByTime(45);
      comms[0]!.allReduce([xs[0]!]);
      // The watchdog looks at 50 ms while rank 1 has not joined yet: 5 ms pending, not 50.
      vi.advanceTimersByTime(10);
      comms[1]!.allReduce([xs[1]!]);
      expect(failures).toEqual([]);
      expect(Array.from(await xs[0]!.read())).toEqual([4]);
    } finally {
      vi.useRealTimers();
    }
  });

  it('reports ranks that disagree on a collective', async () => {
    const { backends, comms } = await group(2, { pollMs: 2 });
    comms[0]!.allReduce([backends[0]!.upload([1, 2], [2])]);
    comms[1]!.broadcast(backends[1]!.upload([1, 2], [2]));
    await expect(comms[1]!.barrier()).rejects.toThrow(
      /invalid usage.*rank 0 called allReduce\(2\) and rank 1 broadcast\(2\)/,
    );
  });

  it('finalises and destroys on dispose, after which calls are refused', async () => {
    const { backends, comms } = await group(2);
    await Promise.all(comms.map((c) => c.dispose()));
    expect(() => comms[0]!.broadcast(backends[0]!.upload([1], [1]))).toThrow(/communicator was disposed/);
  });
});

describe('the watchdog', () => {
  it('aborts the communicator with a clear error when the backend is disposed under it', async () => {
    const failures: string[] = [];
    const { backends, comms } = await group(2, { pollMs: 2, onFailure: (e) => failures.push(e.message) });
    comms[0]!.allReduce([backends[0]!.upload([1], [1])]);
    backends[0]!.dispose();
    // Rank 0 fails on its own; its abort then reaches rank 1 as a remote error.
    await vi.waitFor(() => expect(failures).toHaveLength(2));
    expect(failures[0]).toMatch(/rank 0 of 2: the watchdog failed: .*backend was disposed/);
    expect(failures[1]).toMatch(/rank 1 of 2: remote process exited/);
    expect(() => comms[0]!.allReduce([])).toThrow(/the watchdog failed/);
  });
});
