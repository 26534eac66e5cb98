// A rank of the rendezvous test: rank 0 publishes an id, every other rank
// reads it and answers under its own key, and each prints what it saw.
// With `fail`, rank 1 exits with code 3 before answering.
import { joinRendezvous } from '../rendezvous.js';

const { rank, size, store } = await joinRendezvous(undefined, { timeoutMs: 20_000 });
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
// Rank 0 keeps serving until every rank has answered, which it has by now.
await store.close();
