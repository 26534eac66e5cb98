import { fakeReplayPhases } from './fakeReplay.testkit.js';

// Prints the host µs of a replayed token on the fake driver, per round; see
// "Host phases on the fake driver" in the README for how to run it.
const [layers = '16', tokens = '2000', rounds = '5'] = process.argv.slice(2);
const { kernels, rounds: results } = await fakeReplayPhases({
  layers: Number(layers),
  tokens: Number(tokens),
  rounds: Number(rounds),
});
const fixed = (us: number) => us.toFixed(2).padStart(7);
console.log(`${kernels} kernel calls a step`);
console.log('round   submit-enqueue (µs, medians)');
results.forEach((p, i) => {
  console.log(`${String(i).padStart(5)} ${fixed(p.enqueueUs)}`);
});
const sorted = results.map((p) => p.enqueueUs).sort((a, b) => a - b);
console.log(`median of rounds, enqueue: ${sorted[Math.floor(sorted.length / 2)]!.toFixed(2)} µs`);
