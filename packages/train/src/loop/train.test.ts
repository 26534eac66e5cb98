import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type Backend, createCpuBackend, ShapeError, type Tensor } from '@rayo/core';
import { describe, expect, it } from 'vitest';
import { crossEntropy } from '../autograd/ops/loss.js';
import { reshape } from '../autograd/ops/shape.js';
import type { Tape } from '../autograd/tape.js';
import { loadCheckpoint, saveCheckpoint } from '../checkpoint/checkpoint.js';
import { Embedding } from '../nn/embedding.js';
import { Linear } from '../nn/linear.js';
import { MLP } from '../nn/mlp.js';
import { TransformerBlock } from '../nn/transformer.js';
import { AdamW } from '../optim/adamw.js';
import { LossScaler } from '../optim/lossScaler.js';
import { warmupCosine } from '../optim/schedule.js';
import { SGD } from '../optim/sgd.js';
import { Rng } from '../random.js';
import type { ProgressStream } from './progress.js';
import { type TrainOptions, train } from './train.js';

interface Batch {
  x: Tensor;
  y: Tensor;
}

/** A classification task whose batch depends on the step only. */
function task(backend: Backend) {
  const data = (step: number): Batch => {
    const rng = new Rng(1000 + step);
    const x = rng.normalArray(8 * 6);
    const y = Int32Array.from({ length: 8 }, (_, i) => (x[i * 6]! > 0 ? 1 : 0) + (x[i * 6 + 1]! > 0 ? 2 : 0));
    return { x: backend.upload(x, [8, 6]), y: backend.upload(y, [8], 'i32') };
  };
  const release = (b: Batch) => {
    b.x.dispose();
    b.y.dispose();
  };
  return { data, release };
}

function setup(backend: Backend, seed: number) {
  const model = new MLP(backend, [6, 16, 4], { seed, activation: 'silu' });
  const optimizer = new AdamW(model.namedParameters(), { lr: 0.02 });
  const loss = (tape: Tape, b: Batch) => crossEntropy(tape, model.forward(tape, tape.constant(b.x)), b.y);
  return { model, optimizer, loss };
}

const quiet = { progress: false } as const;
const lr = warmupCosine({ lr: 0.02, warmupSteps: 3, totalSteps: 12 });

/** Trains `steps` steps of `options` and returns the checkpoint saved at the last. */
async function checkpointAfter(options: TrainOptions<Batch>, steps: number): Promise<Uint8Array> {
  let saved: Uint8Array | undefined;
  await train({
    ...options,
    steps,
    checkpoint: {
      every: steps,
      save: (bytes) => {
        saved = bytes;
      },
    },
  });
  return saved!;
}

describe('train', () => {
  it('a resumed run repeats the losses of an uninterrupted one exactly', async () => {
    const backend = createCpuBackend();
    const { data, release } = task(backend);
    const common = { backend, steps: 12, data, release, lr, clipNorm: 1, ...quiet };

    const full = setup(backend, 1);
    const uninterrupted = await train({ ...common, ...full });
    expect(uninterrupted.history.map((r) => r.step)).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]);

    const first = setup(backend, 1);
    const saved = await checkpointAfter({ ...common, ...first }, 5);
    // A differently initialised model: everything must come from the checkpoint.
    const second = setup(backend, 99);
    const resumed = await train({ ...common, ...second, resume: saved });
    expect(resumed.startStep).toBe(5);
    expect(resumed.history.map((r) => r.loss)).toEqual(uninterrupted.history.slice(5).map((r) => r.loss));
    expect(second.optimizer.stepCount).toBe(12);
    const losses = uninterrupted.history.map((r) => r.loss!);
    expect(losses[11]!).toBeLessThan(losses[0]!);
  });

  it("a resumed run with a loss scaler takes the scaler's state from the checkpoint", async () => {
    const backend = createCpuBackend();
    const { data, release } = task(backend);
    const common = { backend, steps: 12, data, release, lr, clipNorm: 1, ...quiet };
    // The scale grows every 2 finite steps: 2^10 after 0, 2^12 after 5 steps (count 1), 2^16 after 12.
    const scaled = () => new LossScaler(backend, { initScale: 2 ** 10, growthInterval: 2 });
    const full = setup(backend, 1);
    const fullScaler = scaled();
    const uninterrupted = await train({ ...common, ...full, lossScaler: fullScaler });
    expect(await fullScaler.readScale()).toBe(2 ** 16);

    const first = setup(backend, 1);
    const saved = await checkpointAfter({ ...common, ...first, lossScaler: scaled() }, 5);
    const second = setup(backend, 99);
    const secondScaler = scaled();
    const resumed = await train({ ...common, ...second, lossScaler: secondScaler, resume: saved });
    expect(resumed.history.map((r) => r.loss)).toEqual(uninterrupted.history.slice(5).map((r) => r.loss));
    expect(await secondScaler.readScale()).toBe(2 ** 16);
    expect((await secondScaler.growth.read())[0]).toBe((await fullScaler.growth.read())[0]);

    // A checkpoint without a scaler's state cannot resume a scaled run.
    const plain = setup(backend, 1);
    const unscaled = await checkpointAfter({ ...common, ...plain }, 2);
    const third = setup(backend, 5);
    await expect(train({ ...common, ...third, lossScaler: scaled(), resume: unscaled })).rejects.toThrow(
      /no loss scaler state/,
    );
  });

  it('saves and resumes through a file', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'rayo-train-'));
    try {
      const backend = createCpuBackend();
      const { data, release } = task(backend);
      const path = join(dir, 'nested', 'run.safetensors');
      const a = setup(backend, 3);
      await train({ backend, ...a, steps: 4, data, release, ...quiet, checkpoint: { every: 2, path } });
      const b = setup(backend, 4);
      const result = await train({ backend, ...b, steps: 6, data, release, ...quiet, resume: path });
      expect(result.startStep).toBe(4);
      expect(result.history).toHaveLength(2);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('names the checkpoint file it cannot resume from', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'rayo-train-'));
    try {
      const backend = createCpuBackend();
      const { data, release } = task(backend);
      const path = join(dir, 'run.safetensors');
      const a = setup(backend, 3);
      await train({ backend, ...a, steps: 2, data, release, ...quiet, checkpoint: { every: 2, path } });
      const other = { ...setup(backend, 4), model: new MLP(backend, [6, 8, 4]) };
      const error = await train({ backend, ...other, steps: 4, data, release, ...quiet, resume: path }).catch(
        (e: unknown) => e,
      );
      expect(error).toBeInstanceOf(ShapeError);
      expect((error as Error).message).toMatch(/does not fit the model/);
      expect((error as Error).message).toContain(path);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('refuses a checkpoint that does not fit', async () => {
    const backend = createCpuBackend();
    const a = setup(backend, 1);
    const bytes = await saveCheckpoint({ model: a.model, optimizer: a.optimizer, step: 0 });
    const other = new MLP(backend, [6, 8, 4]);
    expect(() => loadCheckpoint(bytes, { model: other })).toThrow(/does not fit the model/);
    const sgd = new SGD(a.model.namedParameters());
    expect(() => loadCheckpoint(bytes, { model: a.model, optimizer: sgd })).toThrow(/another optimizer/);
  });

  it('runs evaluation hooks and writes plain progress lines when not on a terminal', async () => {
    const backend = createCpuBackend();
    const { data, release } = task(backend);
    const m = setup(backend, 2);
    const lines: string[] = [];
    const stream: ProgressStream = { write: (text) => lines.push(text), isTTY: false };
    const evaluated: number[] = [];
    const result = await train({
      backend,
      ...m,
      steps: 6,
      data,
      release,
      logEvery: 2,
      progress: { stream, label: 'test' },
      evaluate: {
        every: 4,
        run: (step) => {
          evaluated.push(step);
          return { accuracy: 0.5 };
        },
      },
    });
    expect(evaluated).toEqual([4, 6]);
    expect(result.evaluations).toEqual([
      { step: 4, metrics: { accuracy: 0.5 } },
      { step: 6, metrics: { accuracy: 0.5 } },
    ]);
    // The loss is read back on logged steps only.
    expect(result.history.map((r) => r.loss === undefined)).toEqual([true, false, true, false, true, false]);
    const text = lines.join('');
    expect(text).toMatch(/^test 1\/6 {2}lr /m);
    expect(text).toMatch(/^test 6\/6 {2}loss \d\.\d{4} {2}lr .* step\/s {2}eta \d+s$/m);
    expect(text).toMatch(/^eval at step 4: accuracy 0\.5000$/m);
    expect(text).not.toContain('\r');
  });

  it('draws a bar in place on a terminal', async () => {
    const backend = createCpuBackend();
    const { data, release } = task(backend);
    const m = setup(backend, 2);
    const out: string[] = [];
    const stream: ProgressStream = { write: (text) => out.push(text), isTTY: true, columns: 100 };
    await train({ backend, ...m, steps: 3, data, release, progress: { stream } });
    const text = out.join('');
    expect(text).toContain('\r\x1b[2K');
    expect(text).toMatch(/train \[#+\] 3\/3 {2}loss/);
    expect(text.endsWith('\n')).toBe(true);
  });

  it('keeps the number of live tensors flat across transformer steps', async () => {
    const backend = createCpuBackend();
    const [vocab, dim, t, b] = [16, 8, 5, 2];
    const embed = new Embedding(backend, vocab, dim, { seed: 1 });
    const block = new TransformerBlock(backend, { dim, heads: 2, rope: true, seed: 2 });
    const head = new Linear(backend, dim, vocab, { seed: 3, bias: false });
    const params = [embed, block, head].flatMap((m, i) =>
      m.namedParameters().map(([n, p]) => [`${i}.${n}`, p] as const),
    );
    const model = { namedParameters: () => params.map(([n, p]) => [n, p] as [string, typeof p]) };
    const optimizer = new AdamW(params, { lr: 1e-2 });
    const before = backend.memory().liveTensors;
    const live: number[] = [];
    const data = (step: number) => {
      const rng = new Rng(step);
      const ids = Int32Array.from({ length: t * b }, () => rng.int(vocab));
      return {
        ids: backend.upload(ids, [t, b], 'i32'),
        targets: backend.upload(
          Int32Array.from(ids, (i) => (i + 1) % vocab),
          [t * b],
          'i32',
        ),
      };
    };
    await train({
      backend,
      model,
      optimizer,
      steps: 5,
      data,
      release: (x) => {
        x.ids.dispose();
        x.targets.dispose();
      },
      loss: (tape, x) => {
        const h = block.forward(tape, embed.forward(tape, x.ids));
        return crossEntropy(tape, head.forward(tape, reshape(tape, h, [t * b, dim])), x.targets);
      },
      clipNorm: 1,
      gradNormEvery: 1,
      onStep: () => live.push(backend.memory().liveTensors),
      ...quiet,
    });
    // Attention runs the flash kernels (the cpu backend has them), which cache no mask: nothing stays.
    expect(live).toEqual(live.map(() => before));
  });
});
