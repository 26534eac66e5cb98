import { createServer, type Server, type Socket, connect as tcpConnect } from 'node:net';
import { CollectiveError, InvalidArgumentError, type RendezvousStore } from '@rayo/core';

/**
 * A key-value store over TCP for rendezvous: rank 0 serves it, every rank
 * (rank 0 included) is a client. Messages are lines of JSON; values travel
 * in base64. `get` waits on the server until the key is set, so a rank may
 * ask before rank 0 has published, and clients retry connecting until the
 * server is up, so ranks may start in any order.
 *
 * The connections double as a liveness check while training: a client that
 * `join`ed as a rank and whose connection ends before it `leave`s (its
 * process ended: killed, crashed) is announced to every other client, and a
 * client whose server goes away hears that rank 0 is gone. The operating
 * system closes a dead process's sockets at once, so the others learn of it
 * within moments instead of at a collective's timeout.
 */

interface Request {
  readonly id: number;
  readonly op: 'set' | 'get' | 'join' | 'leave';
  readonly key: string;
  readonly value?: string;
}

/** A reply to request `id`, or (without an id) the news that a rank's connection ended. */
interface Reply {
  readonly id?: number;
  readonly value?: string;
  readonly lost?: number;
}

/** Splits a socket's data into lines. */
function onLines(socket: Socket, handle: (line: string) => void): void {
  let pending = '';
  socket.setEncoding('utf8');
  socket.on('data', (chunk: string) => {
    pending += chunk;
    for (let end = pending.indexOf('\n'); end >= 0; end = pending.indexOf('\n')) {
      handle(pending.slice(0, end));
      pending = pending.slice(end + 1);
    }
  });
}

export interface TcpStoreServerOptions {
  /** Interface to listen on; default all (`0.0.0.0`), so ranks of other hosts reach it. */
  readonly host?: string;
  /** Port; 0 picks a free one (read it from `port` afterwards). */
  readonly port: number;
}

/** The store's server, run by rank 0. */
export class TcpStoreServer {
  readonly #values = new Map<string, string>();
  readonly #waiting = new Map<string, ((value: string) => void)[]>();
  readonly #sockets = new Set<Socket>();
  /** The rank each joined connection announced; removed when it leaves. */
  readonly #ranks = new Map<Socket, number>();
  /** Ranks lost so far: told to clients that connect later too. */
  readonly #lost = new Set<number>();
  #closing = false;

  private constructor(
    readonly server: Server,
    readonly port: number,
  ) {
    server.on('connection', (socket) => this.#serve(socket));
  }

  static async start(options: TcpStoreServerOptions): Promise<TcpStoreServer> {
    const server = createServer();
    await new Promise<void>((resolve, reject) => {
      server.once('error', (error) =>
        reject(
          new CollectiveError(`the rendezvous store could not listen: ${error.message}`, {
            operation: 'TcpStoreServer.start',
            argument: 'port',
            actual: String(options.port),
            cause: error,
          }),
        ),
      );
      server.listen(options.port, options.host ?? '0.0.0.0', resolve);
    });
    const address = server.address();
    const port = typeof address === 'object' && address ? address.port : options.port;
    return new TcpStoreServer(server, port);
  }

  #serve(socket: Socket): void {
    this.#sockets.add(socket);
    socket.on('close', () => {
      this.#sockets.delete(socket);
      const rank = this.#ranks.get(socket);
      this.#ranks.delete(socket);
      if (rank === undefined || this.#closing) return;
      this.#lost.add(rank);
      for (const other of this.#sockets) other.write(`${JSON.stringify({ lost: rank } satisfies Reply)}\n`);
    });
    for (const rank of this.#lost) socket.write(`${JSON.stringify({ lost: rank } satisfies Reply)}\n`);
    socket.on('error', () => socket.destroy());
    const reply = (r: Reply) => socket.write(`${JSON.stringify(r)}\n`);
    onLines(socket, (line) => {
      let request: Request;
      try {
        request = JSON.parse(line) as Request;
      } catch {
        // Not one of ours (a stray connection): drop it rather than the server.
        socket.destroy();
        return;
      }
      if (request.op === 'join' || request.op === 'leave') {
        if (request.op === 'join') this.#ranks.set(socket, Number(request.key));
        else this.#ranks.delete(socket);
        reply({ id: request.id });
        return;
      }
      if (request.op === 'set') {
        this.#values.set(request.key, request.value ?? '');
        for (const wake of this.#waiting.get(request.key) ?? []) wake(request.value ?? '');
        this.#waiting.delete(request.key);
        reply({ id: request.id });
        return;
      }
      const value = this.#values.get(request.key);
      if (value !== undefined) {
        reply({ id: request.id, value });
        return;
      }
      const list = this.#waiting.get(request.key) ?? [];
      list.push((v) => reply({ id: request.id, value: v }));
      this.#waiting.set(request.key, list);
    });
  }

  async close(): Promise<void> {
    this.#closing = true;
    for (const socket of this.#sockets) socket.destroy();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}

export interface TcpStoreOptions {
  readonly host: string;
  readonly port: number;
  /** How long `connect` keeps retrying and `get` waits; default 60 s. */
  readonly timeoutMs?: number;
  /** The server this client closes with it (rank 0's). */
  readonly server?: TcpStoreServer;
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** A client of the rendezvous store. */
export class TcpStore implements RendezvousStore {
  readonly #pending = new Map<number, { resolve: (r: Reply) => void; reject: (e: Error) => void }>();
  readonly #lostListeners = new Set<(rank: number) => void>();
  /** Ranks announced lost so far, also for listeners that subscribe later. */
  readonly #lostRanks: number[] = [];
  #nextId = 0;
  #closed = false;
  #joined = false;

  private constructor(
    readonly socket: Socket,
    readonly options: TcpStoreOptions,
  ) {
    onLines(socket, (line) => {
      const reply = JSON.parse(line) as Reply;
      if (reply.id === undefined) {
        if (reply.lost !== undefined) this.#announceLost(reply.lost);
        return;
      }
      this.#pending.get(reply.id)?.resolve(reply);
      this.#pending.delete(reply.id);
    });
    socket.on('close', () => {
      this.#failAll(`the rendezvous store at ${this.#where} closed the connection`);
      // The server is rank 0's: its connection ending unasked means rank 0 is gone.
      if (!this.#closed) this.#announceLost(0);
    });
    socket.on('error', () => {});
  }

  /** Connects, retrying until the server is up or the timeout has passed. */
  static async connect(options: TcpStoreOptions): Promise<TcpStore> {
    checkPort('TcpStore.connect', options.port);
    const deadline = performance.now() + (options.timeoutMs ?? 60_000);
    for (;;) {
      try {
        const socket = await new Promise<Socket>((resolve, reject) => {
          const s = tcpConnect(options.port, options.host, () => resolve(s));
          s.once('error', reject);
        });
        socket.setNoDelay(true);
        return new TcpStore(socket, options);
      } catch (error) {
        if (performance.now() > deadline) {
          throw new CollectiveError(
            `could not reach the rendezvous store at ${options.host}:${options.port}`,
            {
              operation: 'TcpStore.connect',
              expected: `rank 0 listening within ${options.timeoutMs ?? 60_000} ms`,
              actual: (error as Error).message,
              cause: error,
            },
          );
        }
        await sleep(50);
      }
    }
  }

  get #where(): string {
    return `${this.options.host}:${this.options.port}`;
  }

  async set(key: string, value: Uint8Array): Promise<void> {
    await this.#request('set', key, Buffer.from(value).toString('base64'));
  }

  async get(key: string): Promise<Uint8Array> {
    const reply = await this.#request('get', key);
    return new Uint8Array(Buffer.from(reply.value ?? '', 'base64'));
  }

  /**
   * Announces this client as `rank`: from now on, the end of its connection
   * before `leave()` tells the other ranks that it is gone.
   */
  async join(rank: number): Promise<void> {
    await this.#request('join', String(rank));
    this.#joined = true;
  }

  /** Stops announcing this rank and watching the others: call before an orderly shutdown. */
  async leave(): Promise<void> {
    this.#lostListeners.clear();
    if (this.#joined) await this.#request('leave', '');
    this.#joined = false;
  }

  /**
   * Calls `listener` with a rank whose process ended before it left (rank 0
   * when the store's server itself went away), also for ranks lost before it
   * subscribed. Returns the unsubscribe.
   */
  onPeerLost(listener: (rank: number) => void): () => void {
    this.#lostListeners.add(listener);
    const earlier = [...this.#lostRanks];
    if (earlier.length)
      queueMicrotask(() => {
        for (const rank of earlier) if (this.#lostListeners.has(listener)) listener(rank);
      });
    return () => this.#lostListeners.delete(listener);
  }

  async close(): Promise<void> {
    this.#lostListeners.clear();
    this.#closed = true;
    this.socket.end();
    this.socket.destroy();
    await this.options.server?.close();
  }

  #request(op: Request['op'], key: string, value?: string): Promise<Reply> {
    if (this.#closed) {
      return Promise.reject(
        new CollectiveError('the rendezvous store was closed', { operation: `TcpStore.${op}` }),
      );
    }
    const id = this.#nextId++;
    const timeoutMs = this.options.timeoutMs ?? 60_000;
    return new Promise<Reply>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.#pending.delete(id);
        reject(
          new CollectiveError(`key '${key}' was not set at ${this.#where} within ${timeoutMs} ms`, {
            operation: `TcpStore.${op}`,
            argument: 'key',
          }),
        );
      }, timeoutMs);
      this.#pending.set(id, {
        resolve: (r) => {
          clearTimeout(timer);
          resolve(r);
        },
        reject: (e) => {
          clearTimeout(timer);
          reject(e);
        },
      });
      this.socket.write(`${JSON.stringify({ id, op, key, value } satisfies Request)}\n`);
    });
  }

  #announceLost(rank: number): void {
    if (this.#lostRanks.includes(rank)) return;
    this.#lostRanks.push(rank);
    for (const listener of [...this.#lostListeners]) listener(rank);
  }

  #failAll(message: string): void {
    for (const { reject } of this.#pending.values())
      reject(new CollectiveError(message, { operation: 'TcpStore' }));
    this.#pending.clear();
  }
}

export function checkPort(api: string, port: number): void {
  if (!Number.isInteger(port) || port < 0 || port > 65535) {
    throw new InvalidArgumentError('not a TCP port', {
      operation: api,
      argument: 'port',
      expected: 'an integer in [0, 65535]',
      actual: String(port),
    });
  }
}
