import { CollectiveError, type Communicator, InvalidArgumentError } from '@rayo/core';
import { checkPort, TcpStore, TcpStoreServer } from './tcpStore.js';

/** Where a rank stands, as a launcher tells it through the environment. */
export interface RankEnvironment {
  readonly rank: number;
  readonly size: number;
  /** The rank's index among the ranks of its host (its GPU when each rank sees all of them). */
  readonly localRank: number;
  /** Host and port of rank 0's rendezvous store. */
  readonly masterAddr: string;
  readonly masterPort: number;
}

/** The names the launcher sets, as torchrun does, so one program runs under either. */
export const RANK_ENV = {
  rank: 'RANK',
  size: 'WORLD_SIZE',
  localRank: 'LOCAL_RANK',
  masterAddr: 'MASTER_ADDR',
  masterPort: 'MASTER_PORT',
} as const;

function integerVar(env: NodeJS.ProcessEnv, name: string, fallback: number, min: number): number {
  const text = env[name];
  if (text === undefined || text === '') return fallback;
  const value = Number(text);
  if (!Number.isInteger(value) || value < min) {
    throw new InvalidArgumentError('the environment variable is not a valid integer', {
      operation: 'rankEnvironment',
      argument: name,
      expected: `an integer ≥ ${min}`,
      actual: text,
    });
  }
  return value;
}

/** Reads RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT; a program started alone is rank 0 of 1. */
export function rankEnvironment(env: NodeJS.ProcessEnv = process.env): RankEnvironment {
  const size = integerVar(env, RANK_ENV.size, 1, 1);
  const rank = integerVar(env, RANK_ENV.rank, 0, 0);
  if (rank >= size) {
    throw new InvalidArgumentError('the rank is not below the world size', {
      operation: 'rankEnvironment',
      argument: RANK_ENV.rank,
      expected: `an integer in [0, ${size})`,
      actual: String(rank),
    });
  }
  const masterPort = integerVar(env, RANK_ENV.masterPort, 29500, 0);
  checkPort('rankEnvironment', masterPort);
  return {
    rank,
    size,
    localRank: integerVar(env, RANK_ENV.localRank, rank, 0),
    masterAddr: env[RANK_ENV.masterAddr] || '127.0.0.1',
    masterPort,
  };
}

/**
 * Joins the rendezvous: rank 0 starts the TCP store on the master port (on
 * every interface, for ranks of other hosts) and every rank connects to it
 * and joins as its rank. Keep the store open while training and
 * `watchPeers` it, so that a rank whose process ends is noticed by the others
 * within moments; end with `leaveRendezvous` (rank 0's close stops the server).
 */
export async function joinRendezvous(
  where: RankEnvironment = rankEnvironment(),
  options: { readonly timeoutMs?: number } = {},
): Promise<RankEnvironment & { readonly store: TcpStore }> {
  const { timeoutMs } = options;
  if (where.rank !== 0) {
    const store = await TcpStore.connect({ host: where.masterAddr, port: where.masterPort, timeoutMs });
    await store.join(where.rank);
    return { ...where, store };
  }
  const server = await TcpStoreServer.start({ port: where.masterPort });
  const store = await TcpStore.connect({ host: '127.0.0.1', port: server.port, timeoutMs, server });
  await store.join(0);
  return { ...where, store };
}

/**
 * Aborts `communicator` when another rank's process ends before it left the
 * rendezvous (its connection to the store closed), then calls `onLost` with
 * an error naming both ranks (e.g. to exit the process). A collective whose
 * peer died never completes; without this only the communicator's timeout
 * would end the wait. Returns the unsubscribe.
 */
export function watchPeers(
  store: TcpStore,
  communicator: Communicator,
  onLost: (error: CollectiveError) => void,
): () => void {
  return store.onPeerLost((peer) => {
    const error = new CollectiveError(
      `rank ${communicator.rank} of ${communicator.size}: rank ${peer} ended before leaving the rendezvous (its process exited or was killed)`,
      {
        operation: 'watchPeers',
        expected: `rank ${peer} alive until it leaves`,
        actual: 'its connection closed',
      },
    );
    communicator.abort(`rank ${peer} is gone`);
    onLost(error);
  });
}

/**
 * Leaves the rendezvous in order: stops watching, tells the store, waits
 * (rank 0) until every rank has done so, then closes, so that no rank's
 * shutdown looks like a lost peer to another.
 */
export async function leaveRendezvous(
  store: TcpStore,
  where: Pick<RankEnvironment, 'rank' | 'size'>,
): Promise<void> {
  await store.leave();
  await store.set(`rayo/left/${where.rank}`, new Uint8Array(0));
  if (where.rank === 0) for (let r = 1; r < where.size; r++) await store.get(`rayo/left/${r}`);
  await store.close();
}
