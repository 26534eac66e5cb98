import { parseArgs } from 'node:util';
import {
  type Backend,
  createCpuBackend,
  probeBackends,
  type Tensor,
  UnsupportedOnBackendError,
} from '@rayo/core';
import { AdamW, autograd, MLP, Rng, Tape, train, trainStep, warmupCosine } from '@rayo/train';
import { createBackendFromEnvironment } from '../../backendFromEnvironment.js';
import { loadMnist, PIXELS, shiftImages } from './data.js';

// Trains a 784-256-10 MLP on the MNIST digits of the `mnist` package.

interface Settings {
  readonly backend: string | undefined;
  readonly epochs: number;
  readonly batchSize: number;
  readonly lr: number;
  readonly shift: number;
  readonly seed: number;
  readonly checkpoint: string;
}

function integer(name: string, text: string, min: number): number {
  const value = Number(text);
  if (!Number.isInteger(value) || value < min)
    throw new Error(`--${name} must be an integer >= ${min}, got ${text}`);
  return value;
}

function settings(): Settings {
  // `pnpm demo -- --backend cpu` passes the `--` along.
  const args = process.argv.slice(2);
  const { values } = parseArgs({
    args: args[0] === '--' ? args.slice(1) : args,
    options: {
      backend: { type: 'string' },
      epochs: { type: 'string', default: '8' },
      'batch-size': { type: 'string', default: '128' },
      lr: { type: 'string', default: '4e-3' },
      shift: { type: 'string', default: '1' },
      seed: { type: 'string', default: '0' },
      checkpoint: { type: 'string', default: 'checkpoints/mnist-mlp.safetensors' },
    },
  });
  const lr = Number(values.lr);
  if (!(lr > 0)) throw new Error(`--lr must be a positive number, got ${values.lr}`);
  return {
    backend: values.backend,
    epochs: integer('epochs', values.epochs, 1),
    batchSize: integer('batch-size', values['batch-size'], 1),
    lr,
    shift: integer('shift', values.shift, 0),
    seed: integer('seed', values.seed, 0),
    checkpoint: values.checkpoint,
  };
}

const HIDDEN = 256;
const CLASSES = 10;

interface Batch {
  /** The epoch's (shifted) training images, on the device. */
  readonly images: Tensor;
  readonly ids: Tensor;
  readonly labels: Tensor;
}

function model(backend: Backend, seed: number, hidden = HIDDEN): MLP {
  return new MLP(backend, [PIXELS, hidden, CLASSES], { seed });
}

/** Logits of the rows `ids` of the images already on the device: the batch is gathered there. */
function logits(tape: Tape, mlp: MLP, images: Tensor, ids: Tensor) {
  return mlp.forward(tape, autograd.embedding(tape, tape.constant(images), ids));
}

/** The kernels a training step and an evaluation run, found by one small step on the cpu backend. */
async function requiredKernels(): Promise<Set<string>> {
  const cpu = createCpuBackend();
  const mlp = model(cpu, 0, 4);
  const optimizer = new AdamW(mlp.namedParameters());
  const images = cpu.zeros([2, PIXELS]);
  const ids = cpu.upload([0, 1], [2], 'i32');
  const kernels = new Set<string>();
  await trainStep({
    backend: cpu,
    optimizer,
    clipNorm: 1,
    kernelsUsed: kernels,
    loss: (tape) => autograd.crossEntropy(tape, logits(tape, mlp, images, ids), ids),
  });
  cpu.dispose();
  return kernels;
}

function missingKernels(backend: Backend, kernels: Set<string>): string[] {
  return [...kernels].filter((k) => !backend.supports(k)).sort();
}

async function chooseBackend(name: string | undefined, kernels: Set<string>): Promise<Backend> {
  if (name) {
    const backend = await createBackendFromEnvironment(name);
    const missing = missingKernels(backend, kernels);
    if (missing.length > 0) {
      backend.dispose();
      throw new UnsupportedOnBackendError(`backend '${name}' lacks kernels: ${missing.join(', ')}`);
    }
    return backend;
  }
  for (const status of await probeBackends(['cuda', 'wgpu', 'cpu'])) {
    if (!status.available) {
      console.error(`skipping ${status.name}: ${status.reason}`);
      continue;
    }
    const backend = await createBackendFromEnvironment(status.name);
    const missing = missingKernels(backend, kernels);
    if (missing.length === 0) return backend;
    console.error(`skipping ${status.name}: it lacks ${missing.join(', ')}`);
    backend.dispose();
  }
  throw new UnsupportedOnBackendError('no backend can run the demo');
}

async function main(): Promise<void> {
  const started = performance.now();
  const options = settings();
  const { epochs, batchSize, lr: peakLr, shift: maxShift, seed, checkpoint } = options;
  const { train: trainSet, test: testSet } = await loadMnist();
  const backend = await chooseBackend(options.backend, await requiredKernels());
  console.error(`backend: ${backend.name} (${backend.info.device})`);
  console.error(`data: ${trainSet.count} training and ${testSet.count} test digits`);

  const testImages = backend.upload(testSet.images, [testSet.count, PIXELS]);
  const testIds = backend.upload(
    Int32Array.from({ length: testSet.count }, (_, i) => i),
    [testSet.count],
    'i32',
  );
  const mlp = model(backend, seed);
  const optimizer = new AdamW(mlp.namedParameters(), {
    lr: peakLr,
    weightDecay: 1e-4,
    noDecay: (_name, p) => p.shape.length < 2,
  });
  const stepsPerEpoch = Math.floor(trainSet.count / batchSize);
  const steps = epochs * stepsPerEpoch;

  // Each epoch's images are shifted on the host once and uploaded; batches are
  // gathered from them on the device. Everything is seeded by the epoch, so
  // the batch of a step depends on the step alone (as resuming needs).
  let epochData: { epoch: number; images: Tensor; order: Int32Array } | undefined;
  const data = (step: number): Batch => {
    const epoch = Math.floor(step / stepsPerEpoch);
    if (epochData?.epoch !== epoch) {
      epochData?.images.dispose();
      const rng = new Rng(seed * 1000 + epoch);
      const order = rng.permutation(trainSet.count);
      const shifted = shiftImages(trainSet.images, trainSet.count, maxShift, (n) => rng.int(n));
      epochData = { epoch, order, images: backend.upload(shifted, [trainSet.count, PIXELS]) };
    }
    const start = (step % stepsPerEpoch) * batchSize;
    const ids = epochData.order.subarray(start, start + batchSize);
    return {
      images: epochData.images,
      ids: backend.upload(ids, [batchSize], 'i32'),
      labels: backend.upload(
        Int32Array.from(ids, (i) => trainSet.labels[i]!),
        [batchSize],
        'i32',
      ),
    };
  };

  const accuracy = async (): Promise<number> => {
    using tape = new Tape(backend, { grad: false });
    const out = await logits(tape, mlp, testImages, testIds).value.read();
    let correct = 0;
    for (let r = 0; r < testSet.count; r++) {
      let best = 0;
      for (let c = 1; c < CLASSES; c++) if (out[r * CLASSES + c]! > out[r * CLASSES + best]!) best = c;
      if (best === testSet.labels[r]) correct++;
    }
    return correct / testSet.count;
  };

  const result = await train({
    backend,
    model: mlp,
    optimizer,
    steps,
    data,
    release: (b) => {
      b.ids.dispose();
      b.labels.dispose();
    },
    loss: (tape, b) => autograd.crossEntropy(tape, logits(tape, mlp, b.images, b.ids), b.labels),
    lr: warmupCosine({
      lr: peakLr,
      warmupSteps: Math.min(100, steps),
      totalSteps: steps,
      minLr: peakLr / 20,
    }),
    clipNorm: 1,
    progress: { label: 'mnist' },
    evaluate: { every: stepsPerEpoch, run: async () => ({ accuracy: await accuracy() }) },
    checkpoint: { every: stepsPerEpoch, path: checkpoint, metadata: { model: 'mlp-784-256-10' } },
  });

  const final = result.evaluations[result.evaluations.length - 1]?.metrics.accuracy ?? Number.NaN;
  const seconds = (performance.now() - started) / 1000;
  console.log(
    `test accuracy ${(100 * final).toFixed(2)}% after ${epochs} epochs (${steps} steps, ` +
      `${result.stepsPerSecond.toFixed(1)} steps/s) on ${backend.name} in ${seconds.toFixed(1)}s; ` +
      `checkpoint: ${checkpoint}`,
  );
  mlp.dispose();
  optimizer.dispose();
  epochData?.images.dispose();
  testImages.dispose();
  testIds.dispose();
  backend.dispose();
}

try {
  await main();
} catch (error) {
  console.error(error instanceof Error ? error.message : error);
  process.exitCode = 1;
}
