// Trains a 784-256-10 ReLU MLP on the 10 000 handwritten digits the `mnist`
// package ships (every fifth one of each digit held out for testing) and
// reports the test accuracy.
//
//   node mnist.mjs [--backend wgpu|cpu|cuda] [--epochs N] [--quick]
import { readFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { parseArgs } from 'node:util';
import { exampleBackend } from '@rayo/example-shared/backend';
import { AdamW, autograd, MLP, Rng, Tape, train, warmupCosine } from '@rayo/train';

const { values } = parseArgs({
  options: {
    backend: { type: 'string', default: 'wgpu' },
    epochs: { type: 'string', default: '5' },
    quick: { type: 'boolean', default: false },
  },
});
const PIXELS = 784;
const BATCH = 128;

// The digits, as rows of 784 values in [0, 1].
const root = dirname(createRequire(import.meta.url).resolve('mnist/package.json'));
const split = { train: { images: [], labels: [] }, test: { images: [], labels: [] } };
for (let digit = 0; digit < 10; digit++) {
  const { data } = JSON.parse(await readFile(join(root, 'src', 'digits', `${digit}.json`), 'utf8'));
  for (let i = 0; i < Math.floor(data.length / PIXELS); i++) {
    const part = i % 5 === 0 ? split.test : split.train;
    part.images.push(data.slice(i * PIXELS, (i + 1) * PIXELS));
    part.labels.push(digit);
  }
}
const trainCount = split.train.labels.length;
const stepsPerEpoch = Math.floor(trainCount / BATCH);
const steps = values.quick ? 10 : stepsPerEpoch * Number(values.epochs);

const { backend, log } = await exampleBackend(values.backend);
log(
  `${trainCount} training and ${split.test.labels.length} test digits on ${backend.name} (${backend.info.device})`,
);
const model = new MLP(backend, [PIXELS, 256, 10], { seed: 0 });
const optimizer = new AdamW(model.namedParameters(), { lr: 4e-3 });

function upload(indices, part) {
  const x = new Float32Array(indices.length * PIXELS);
  indices.forEach((n, row) => {
    x.set(part.images[n], row * PIXELS);
  });
  return {
    x: backend.upload(x, [indices.length, PIXELS]),
    y: backend.upload(
      Int32Array.from(indices, (n) => part.labels[n]),
      [indices.length],
      'i32',
    ),
  };
}

// Every test digit, or every fourth with --quick.
const tested = Array.from({ length: split.test.labels.length }, (_, n) => n).filter(
  (n) => !values.quick || n % 4 === 0,
);

async function accuracy() {
  let correct = 0;
  for (let start = 0; start < tested.length; start += 512) {
    const indices = tested.slice(start, start + 512);
    const batch = upload(indices, split.test);
    const tape = new Tape(backend, { grad: false });
    try {
      const logits = await model.forward(tape, tape.constant(batch.x)).value.read();
      indices.forEach((n, row) => {
        const scores = logits.subarray(row * 10, row * 10 + 10);
        if (scores.indexOf(Math.max(...scores)) === split.test.labels[n]) correct++;
      });
    } finally {
      tape.dispose();
      batch.x.dispose();
      batch.y.dispose();
    }
  }
  return correct / tested.length;
}

try {
  const result = await train({
    backend,
    model,
    optimizer,
    steps,
    // A fresh shuffle each epoch; the batch of a step depends on the step only.
    data: (step) => {
      const epoch = Math.floor(step / stepsPerEpoch);
      const order = new Rng(epoch).permutation(trainCount);
      const first = (step % stepsPerEpoch) * BATCH;
      return upload(Array.from(order.subarray(first, first + BATCH)), split.train);
    },
    release: (b) => {
      b.x.dispose();
      b.y.dispose();
    },
    loss: (tape, b) => autograd.crossEntropy(tape, model.forward(tape, tape.constant(b.x)), b.y),
    lr: warmupCosine({ lr: 4e-3, warmupSteps: Math.min(50, steps), totalSteps: steps }),
    clipNorm: 1,
    progress: false,
  });
  log(`${steps} steps in ${result.seconds.toFixed(1)} s`);
  log(`test accuracy ${(100 * (await accuracy())).toFixed(2)}% on ${tested.length} digits`);
} finally {
  optimizer.dispose();
  model.dispose();
  backend.dispose();
}
