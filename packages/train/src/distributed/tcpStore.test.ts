import { CollectiveError, InvalidArgumentError } from '@rayo/core';
import { describe, expect, it } from 'vitest';
import { rankEnvironment } from './rendezvous.js';
import { TcpStore, TcpStoreServer } from './tcpStore.js';

describe('TcpStore', () => {
  it('answers a get that arrives before its set, and serves several clients', async () => {
    const server = await TcpStoreServer.start({ host: '127.0.0.1', port: 0 });
    const [a, b] = await Promise.all(
      [0, 1].map(() => TcpStore.connect({ host: '127.0.0.1', port: server.port })),
    );
    const waiting = b!.get('nccl/unique-id');
    await a!.set('nccl/unique-id', new Uint8Array([0, 255, 7]));
    expect(Array.from(await waiting)).toEqual([0, 255, 7]);
    expect(Array.from(await a!.get('nccl/unique-id'))).toEqual([0, 255, 7]);
    await b!.close();
    await a!.close();
    await server.close();
  });

  it('times out a get of a key nobody sets, naming the key', async () => {
    const server = await TcpStoreServer.start({ host: '127.0.0.1', port: 0 });
    const store = await TcpStore.connect({ host: '127.0.0.1', port: server.port, timeoutMs: 30 });
    const error = await store.get('never').catch((e: unknown) => e);
    expect(error).toBeInstanceOf(CollectiveError);
    expect((error as Error).message).toMatch(
      /TcpStore.get: argument 'key': key 'never' was not set at 127.0.0.1:\d+ within 30 ms/,
    );
    await store.close();
    await server.close();
  });

  it('fails a pending get when the server goes away, and refuses calls after close', async () => {
    const server = await TcpStoreServer.start({ host: '127.0.0.1', port: 0 });
    const store = await TcpStore.connect({ host: '127.0.0.1', port: server.port });
    const pending = store.get('id');
    await server.close();
    await expect(pending).rejects.toThrow(/closed the connection/);
    await store.close();
    await expect(store.set('id', new Uint8Array(1))).rejects.toThrow(/the rendezvous store was closed/);
  });

  it('tells the other ranks when a joined rank’s connection ends before it leaves', async () => {
    const server = await TcpStoreServer.start({ host: '127.0.0.1', port: 0 });
    const [a, b, c] = await Promise.all(
      [0, 1, 2].map(() => TcpStore.connect({ host: '127.0.0.1', port: server.port })),
    );
    await Promise.all([a!.join(0), b!.join(1), c!.join(2)]);
    const heardByA: number[] = [];
    a!.onPeerLost((rank) => heardByA.push(rank));
    // rank 2 leaves in order: nobody hears of it
    await c!.leave();
    await c!.close();
    // rank 1's process "dies": its socket closes without a leave
    const told = new Promise<void>((resolve) => a!.onPeerLost(() => resolve()));
    b!.socket.destroy();
    await told;
    expect(heardByA).toEqual([1]);
    // the server itself going away is rank 0 gone, for a client still watching
    const d = await TcpStore.connect({ host: '127.0.0.1', port: server.port });
    await d.join(3);
    const heardByD: number[] = [];
    const gone = new Promise<void>((resolve) =>
      d.onPeerLost((rank) => {
        heardByD.push(rank);
        if (rank === 0) resolve();
      }),
    );
    await server.close();
    await gone;
    // a late client hears of ranks lost before it came too
    expect(heardByD).toEqual([1, 0]);
    expect(heardByA).toEqual([1, 0]);
    await a!.close();
    await d.close();
  });

  it('gives up connecting after its timeout', async () => {
    const server = await TcpStoreServer.start({ host: '127.0.0.1', port: 0 });
    const port = server.port;
    await server.close();
    await expect(TcpStore.connect({ host: '127.0.0.1', port, timeoutMs: 60 })).rejects.toThrow(
      /could not reach the rendezvous store at 127.0.0.1:\d+/,
    );
  });
});

describe('rankEnvironment', () => {
  it('reads the launcher’s variables, and makes a lone program rank 0 of 1', () => {
    expect(
      rankEnvironment({
        RANK: '1',
        WORLD_SIZE: '2',
        LOCAL_RANK: '1',
        MASTER_ADDR: '10.0.0.5',
        MASTER_PORT: '29400',
      }),
    ).toEqual({ rank: 1, size: 2, localRank: 1, masterAddr: '10.0.0.5', masterPort: 29400 });
    expect(rankEnvironment({})).toEqual({
      rank: 0,
      size: 1,
      localRank: 0,
      masterAddr: '127.0.0.1',
      masterPort: 29500,
    });
  });

  it('names the variable that is wrong', () => {
    expect(() => rankEnvironment({ RANK: '2', WORLD_SIZE: '2' })).toThrow(
      /argument 'RANK'.*expected an integer in \[0, 2\)/,
    );
    expect(() => rankEnvironment({ WORLD_SIZE: 'two' })).toThrow(InvalidArgumentError);
    expect(() => rankEnvironment({ MASTER_PORT: '70000' })).toThrow(/port/);
  });
});

describe('TcpStoreServer', () => {
  it('drops a connection that does not speak its protocol and keeps serving', async () => {
    const { connect } = await import('node:net');
    const server = await TcpStoreServer.start({ host: '127.0.0.1', port: 0 });
    const stray = connect(server.port, '127.0.0.1');
    const closed = new Promise((resolve) => stray.on('close', resolve));
    stray.write('GET / HTTP/1.1\n');
    await closed;
    const store = await TcpStore.connect({ host: '127.0.0.1', port: server.port });
    await store.set('k', new Uint8Array([1]));
    expect(Array.from(await store.get('k'))).toEqual([1]);
    await store.close();
    await server.close();
  });
});
