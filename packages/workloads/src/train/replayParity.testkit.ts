import type { Backend } from '@rayo/core';
import { AdamW, LossScaler, ReplayedStep, trainStep } from '@rayo/train';
import { expect } from 'vitest';
import { buildWorkload, type WorkloadSpec } from './workload.js';

/** What a replay check leaves for its caller's own assertions. */
export interface ReplayParity {
  /** The replayed step's loss scale after the steps (where `growthInterval` gave scalers). */
  readonly scale?: number;
  readonly stepCount: number;
}

/**
 * Trains `spec` eagerly and replayed on `backend` for 4 steps (each with its
 * own loss scaler of `growthInterval` where given) and checks that losses,
 * gradient norms and parameters agree within `tolerance`; disposes the backend.
 */
export async function expectReplayMatchesEager(
  backend: Backend,
  spec: WorkloadSpec,
  tolerance: number,
  scaled?: { readonly growthInterval: number },
): Promise<ReplayParity> {
  try {
    const eager = buildWorkload(backend, spec, 5);
    const replayedWork = buildWorkload(backend, spec, 5);
    const eagerOpt = new AdamW(eager.model.namedParameters(), { lr: 0.01 });
    const optimizer = new AdamW(replayedWork.model.namedParameters(), { lr: 0.01 });
    using eagerScaler = scaled ? new LossScaler(backend, scaled) : undefined;
    using lossScaler = scaled ? new LossScaler(backend, scaled) : undefined;
    const step = new ReplayedStep({
      backend,
      optimizer,
      inputs: Object.fromEntries(
        Object.entries(replayedWork.batch).map(([k, v]) => [k, { shape: v.shape, dtype: v.dtype }]),
      ),
      loss: (tape, inputs) => replayedWork.lossOn(tape, inputs),
      clipNorm: 0.5,
      readGradNorm: true,
      ...(lossScaler ? { lossScaler } : {}),
    });
    for (let i = 0; i < 4; i++) {
      const e = await trainStep({
        backend,
        optimizer: eagerOpt,
        loss: (tape) => eager.loss(tape),
        clipNorm: 0.5,
        readGradNorm: true,
        ...(eagerScaler ? { lossScaler: eagerScaler } : {}),
      });
      const r = await step.run(replayedWork.batch);
      if (scaled) expect([r.skipped, e.skipped]).toEqual([false, false]);
      expect(Math.abs(r.loss! - e.loss!), `step ${i + 1} loss`).toBeLessThanOrEqual(tolerance * e.loss!);
      expect(Math.abs(r.gradNorm! - e.gradNorm!), `step ${i + 1} norm`).toBeLessThanOrEqual(
        tolerance * e.gradNorm!,
      );
    }
    const result: ReplayParity = {
      ...(lossScaler ? { scale: await lossScaler.readScale() } : {}),
      stepCount: optimizer.stepCount,
    };
    const a = eager.model.parameters();
    const b = replayedWork.model.parameters();
    for (let i = 0; i < a.length; i++) {
      const [x, y] = [await a[i]!.value.read(), await b[i]!.value.read()];
      expect(b[i]!.value.dtype).toBe('f32');
      for (let j = 0; j < x.length; j++) {
        expect(Math.abs(Number(x[j]) - Number(y[j])), `parameter ${i}[${j}]`).toBeLessThanOrEqual(
          tolerance * Math.max(1, Math.abs(Number(x[j]))),
        );
      }
    }
    step.dispose();
    optimizer.dispose();
    eagerOpt.dispose();
    replayedWork.dispose();
    eager.dispose();
    return result;
  } finally {
    backend.dispose();
  }
}
