// A rank of @rayo/train's rendezvous test (launcher.test.ts), run as its own
// process after bundling (rankPrograms.ts): rank 0 publishes an id, every other rank
// reads it and answers under its own key, and each prints what it saw.
// With `fail`, rank 1 exits with code 3 before answering; with `die`, rank 1
// is killed (SIGKILL) and the others, watching their peers, exit with code 4
// naming it.
import type { Communicator } from '@rayo/core';
import { joinRendezvous, leaveRendezvous, watchPeers } from '@rayo/train';

const where = await joinRendezvous(undefined, { timeoutMs: 20_000 });
const { rank, size, store } = where;
if (process.argv[2] === 'die') {
  const aborted: string[] = [];
  const communicator = {
    rank,
    size,
    abort: (reason: string) => aborted.push(reason),
  } as unknown as Communicator;
  watchPeers(store, communicator, (error) => {
    console.error(`${error.message}; communicator aborted: ${aborted.join(', ')}`);
    process.exit(4);
  });
  // Every rank watches before rank 1 dies.
  await store.set(`watching/${rank}`, new Uint8Array(0));
  if (rank === 1) {
    for (let r = 0; r < size; r++) await store.get(`watching/${r}`);
    process.kill(process.pid, 'SIGKILL');
  }
  // Never set: only the lost peer ends this wait early.
  await store.get('never');
}
if (process.argv[2] === 'fail' && rank === 1) process.exit(3);
let seen: number[];
if (rank === 0) {
  await store.set('id', new Uint8Array([7, 8, 9]));
  const answers = await Promise.all(Array.from({ length: size - 1 }, (_, i) => store.get(`answer/${i + 1}`)));
  seen = answers.flatMap((a) => Array.from(a));
} else {
  const id = await store.get('id');
  seen = Array.from(id);
  await store.set(`answer/${rank}`, new Uint8Array(id.map((b) => b * 10 + rank)));
}
console.log(JSON.stringify({ rank, size, gpu: process.env.CUDA_VISIBLE_DEVICES, seen }));
// Rank 0 keeps serving until every rank has left; nobody mistakes that for a lost peer.
await leaveRendezvous(store, where);
