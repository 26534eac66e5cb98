import {
  type Backend,
  createCpuBackend,
  InvalidArgumentError,
  SingleRankCommunicator,
  type Tensor,
} from '@rayo/core';
import { afterAll, describe, expect, it } from 'vitest';
import { mseLoss } from '../autograd/ops/loss.js';
import type { Tape } from '../autograd/tape.js';
import { DataParallel } from '../distributed/dataParallel.js';
import { ReplayedDataParallelStep } from '../distributed/replayedStep.js';
import { dataParallelStep } from '../distributed/step.js';
import { ReplayedStep } from '../loop/replayedStep.js';
import { trainStep } from '../loop/step.js';
import { train } from '../loop/train.js';
import { MLP } from '../nn/mlp.js';
import { Rng } from '../random.js';
import { AdamW } from './adamw.js';
import { LossScaler } from './lossScaler.js';
import { SGD } from './sgd.js';

const backend: Backend = createCpuBackend();
afterAll(() => backend.dispose());

/** A small regression problem: an MLP [6, 8, 3] on 5 random rows; fresh random numbers, no zeros. */
function problem(seed: number) {
  const rng = new Rng(seed);
  const model = new MLP(backend, [6, 8, 3], { activation: 'gelu', seed });
  const x = backend.upload(rng.uniformArray(5 * 6, -1, 1), [5, 6]);
  const y = backend.upload(rng.uniformArray(5 * 3, -1, 1), [5, 3]);
  const optimizer = new AdamW(model.namedParameters(), { lr: 0.01 });
  const loss = (tape: Tape, input: Tensor = x) => mseLoss(tape, model.forward(tape, tape.constant(input)), y);
  return {
    model,
    x,
    optimizer,
    loss,
    dispose() {
      optimizer.dispose();
      model.dispose();
      x.dispose();
      y.dispose();
    },
  };
}

/** Every parameter and every AdamW moment, read to the host. */
async function snapshot(model: MLP, optimizer: AdamW): Promise<Float32Array[]> {
  const tensors = [...model.parameters().map((p) => p.value), ...optimizer.stateTensors().map(([, t]) => t)];
  return (await Promise.all(tensors.map((t) => t.read()))) as Float32Array[];
}

function maxRelativeDiff(a: Float32Array[], b: Float32Array[]): number {
  let worst = 0;
  a.forEach((x, i) => {
    x.forEach((v, j) => {
      worst = Math.max(worst, Math.abs(v - b[i]![j]!) / Math.max(1e-3, Math.abs(v)));
    });
  });
  return worst;
}

describe('LossScaler', () => {
  it("starts at PyTorch GradScaler's defaults and refuses bad options, naming them", async () => {
    using scaler = new LossScaler(backend);
    expect([scaler.initScale, scaler.growthFactor, scaler.backoffFactor, scaler.growthInterval]).toEqual([
      65536, 2, 0.5, 2000,
    ]);
    expect(await scaler.readScale()).toBe(65536);
    const bad = [
      [{ initScale: 0 }, 'initScale'],
      [{ initScale: Number.POSITIVE_INFINITY }, 'initScale'],
      [{ growthFactor: 1 }, 'growthFactor'],
      [{ backoffFactor: 1 }, 'backoffFactor'],
      [{ backoffFactor: 0 }, 'backoffFactor'],
      [{ growthInterval: 0 }, 'growthInterval'],
      [{ growthInterval: 1.5 }, 'growthInterval'],
    ] as const;
    for (const [options, argument] of bad) {
      expect(() => new LossScaler(backend, options), argument).toThrow(
        expect.objectContaining({ name: 'InvalidArgumentError', argument, operation: 'LossScaler' }),
      );
    }
  });

  it('a scaled step is the unscaled step within rounding (clipped and not)', async () => {
    for (const clipNorm of [undefined, 0.05]) {
      const plain = problem(3);
      const scaled = problem(3);
      using scaler = new LossScaler(backend, { initScale: 1024 });
      for (let i = 0; i < 3; i++) {
        const a = await trainStep({
          backend,
          optimizer: plain.optimizer,
          loss: (t) => plain.loss(t),
          clipNorm,
          readGradNorm: true,
        });
        const b = await trainStep({
          backend,
          optimizer: scaled.optimizer,
          loss: (t) => scaled.loss(t),
          clipNorm,
          readGradNorm: true,
          lossScaler: scaler,
        });
        expect(b.skipped).toBe(false);
        expect(b.loss).toBeCloseTo(a.loss!, 5);
        // The norm of the scaled gradients is S times the true one.
        expect(b.gradNorm! / 1024).toBeCloseTo(a.gradNorm!, 4);
      }
      expect(scaled.optimizer.stepCount).toBe(3);
      const diff = maxRelativeDiff(
        await snapshot(plain.model, plain.optimizer),
        await snapshot(scaled.model, scaled.optimizer),
      );
      expect(diff, `clipNorm ${clipNorm}`).toBeLessThan(1e-4);
      plain.dispose();
      scaled.dispose();
    }
  });

  it('skips a step with an inf gradient: parameters, moments and step count unchanged, the scale halved', async () => {
    const p = problem(5);
    using scaler = new LossScaler(backend, { initScale: 256 });
    await trainStep({ backend, optimizer: p.optimizer, loss: (t) => p.loss(t), lossScaler: scaler });
    const before = await snapshot(p.model, p.optimizer);
    const inf = backend.upload(
      Float32Array.from({ length: 30 }, (_, i) => (i === 7 ? Number.POSITIVE_INFINITY : 0.5 + i / 30)),
      [5, 6],
    );
    const result = await trainStep({
      backend,
      optimizer: p.optimizer,
      loss: (t) => p.loss(t, inf),
      lossScaler: scaler,
      readGradNorm: true,
    });
    expect(result.skipped).toBe(true);
    expect(Number.isFinite(result.gradNorm!)).toBe(false);
    expect(p.optimizer.stepCount).toBe(1);
    expect(await scaler.readScale()).toBe(128);
    expect(await snapshot(p.model, p.optimizer)).toEqual(before);
    // The next finite step is taken as step 2.
    const next = await trainStep({
      backend,
      optimizer: p.optimizer,
      loss: (t) => p.loss(t),
      lossScaler: scaler,
    });
    expect(next.skipped).toBe(false);
    expect(p.optimizer.stepCount).toBe(2);
    expect(await scaler.readScale()).toBe(128);
    inf.dispose();
    p.dispose();
  });

  it('grows the scale after growthInterval finite steps in a row, and only then', async () => {
    const p = problem(7);
    using scaler = new LossScaler(backend, { initScale: 8, growthFactor: 4, growthInterval: 3 });
    const scales: number[] = [];
    for (let i = 0; i < 7; i++) {
      await trainStep({ backend, optimizer: p.optimizer, loss: (t) => p.loss(t), lossScaler: scaler });
      scales.push(await scaler.readScale());
    }
    expect(scales).toEqual([8, 8, 32, 32, 32, 128, 128]);
    expect(Array.from(await scaler.growth.read())).toEqual([1]);
    p.dispose();
  });

  it('works in a replayed step: skips on the device, with no readback of the norm', async () => {
    const eager = problem(9);
    const replayedWork = problem(9);
    using eagerScaler = new LossScaler(backend, { initScale: 512, growthInterval: 2 });
    using scaler = new LossScaler(backend, { initScale: 512, growthInterval: 2 });
    using step = new ReplayedStep({
      backend,
      optimizer: replayedWork.optimizer,
      inputs: { x: { shape: [5, 6] } },
      loss: (tape, { x }) => replayedWork.loss(tape, x),
      clipNorm: 0.5,
      lossScaler: scaler,
    });
    const finite = Array.from(await eager.x.read());
    const overflowing = finite.map((v, i) => (i === 3 ? Number.NaN : v));
    const skippedAt = new Set([2]);
    for (let i = 0; i < 5; i++) {
      const data = skippedAt.has(i) ? overflowing : finite;
      const input = backend.upload(data, [5, 6]);
      const e = await trainStep({
        backend,
        optimizer: eager.optimizer,
        loss: (t) => eager.loss(t, input),
        clipNorm: 0.5,
        lossScaler: eagerScaler,
      });
      const r = await step.run({ x: { data: Float32Array.from(data), shape: [5, 6] } });
      expect([r.skipped, e.skipped], `step ${i}`).toEqual([skippedAt.has(i), skippedAt.has(i)]);
      if (!skippedAt.has(i)) expect(r.loss).toBeCloseTo(e.loss!, 5);
      expect(await scaler.readScale(), `step ${i}`).toBe(await eagerScaler.readScale());
      input.dispose();
    }
    // Steps 0, 1 grow 512 to 1024; the NaN halves it; 3, 4 grow it again.
    expect(await scaler.readScale()).toBe(1024);
    expect(replayedWork.optimizer.stepCount).toBe(4);
    expect(eager.optimizer.stepCount).toBe(4);
    const diff = maxRelativeDiff(
      await snapshot(eager.model, eager.optimizer),
      await snapshot(replayedWork.model, replayedWork.optimizer),
    );
    expect(diff).toBeLessThan(1e-5);
    eager.dispose();
    replayedWork.dispose();
  });

  it('trains through train(), reporting skipped steps', async () => {
    const p = problem(11);
    using scaler = new LossScaler(backend);
    const result = await train({
      backend,
      model: p.model,
      optimizer: p.optimizer,
      steps: 20,
      data: () => p.x,
      loss: (tape, x) => p.loss(tape, x),
      lossScaler: scaler,
      progress: false,
    });
    expect(result.history.every((r) => r.skipped === false)).toBe(true);
    expect(result.history[19]!.loss!).toBeLessThan(result.history[0]!.loss!);
    expect(p.optimizer.stepCount).toBe(20);
    p.dispose();
  });

  it('refuses loss scaling with an optimizer that cannot unscale on the device', async () => {
    const p = problem(13);
    const sgd = new SGD(p.model.namedParameters(), { lr: 0.1 });
    using scaler = new LossScaler(backend);
    await expect(
      trainStep({ backend, optimizer: sgd, loss: (t) => p.loss(t), lossScaler: scaler }),
    ).rejects.toThrow(InvalidArgumentError);
    sgd.dispose();
    p.dispose();
  });

  it('refuses loss scaling in the data-parallel steps, which do not seed backward with it', async () => {
    const p = problem(15);
    using scaler = new LossScaler(backend);
    const parallel = new DataParallel({ communicator: new SingleRankCommunicator(backend), model: p.model });
    const options = {
      backend,
      optimizer: p.optimizer,
      parallel,
      loss: (t: Tape) => p.loss(t),
      lossScaler: scaler,
    };
    await expect(dataParallelStep(options)).rejects.toThrow(
      expect.objectContaining({ operation: 'dataParallelStep', argument: 'lossScaler' }),
    );
    expect(() => new ReplayedDataParallelStep(options)).toThrow(
      expect.objectContaining({ operation: 'ReplayedDataParallelStep', argument: 'lossScaler' }),
    );
    p.dispose();
  });
});
