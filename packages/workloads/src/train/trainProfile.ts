import type { Backend, KernelRunner, Tensor } from '@rayo/core';
import { AdamW, gradNorm, Tape } from '@rayo/train';
import { type Owned, profileStep, type StepProfile } from '../decode/stepProfile.js';
import { THROUGHPUT_ADAMW } from './throughput.js';
import { buildWorkload, type WorkloadSpec } from './workload.js';

export interface TrainProfileOptions {
  readonly seed?: number;
  /** Clip to this global norm, as the throughput runs do (default 1). */
  readonly clipNorm?: number;
  /** Back-to-back repetitions of a kernel group per timing (default 10). */
  readonly repetitions?: number;
  /** Time each group of identical calls (default true); false gives the step time and the call table. */
  readonly kernels?: boolean;
}

/**
 * Where one training step of `spec` spends its device time: forward,
 * backward, the global norm and AdamW recorded as the replayed step records
 * them (one CUDA graph, one command buffer), then each group of identical
 * kernel calls timed alone (see `profileStep`). The parameters are trained
 * by the recordings, which does not change the shapes or the work.
 */
export async function profileTrainingStep(
  backend: Backend,
  spec: WorkloadSpec,
  options: TrainProfileOptions = {},
): Promise<StepProfile> {
  const work = buildWorkload(backend, spec, options.seed ?? 0);
  const optimizer = new AdamW(work.model.namedParameters(), THROUGHPUT_ADAMW);
  const clipNorm = options.clipNorm ?? 1;
  try {
    const record = (runner: KernelRunner, made: Owned[]) => {
      const tape = new Tape(backend, { runner });
      made.push(tape);
      tape.backward(work.loss(tape));
      const norm = gradNorm(optimizer.params, { runner });
      made.push(norm);
      optimizer.step(runner, { norm, maxNorm: clipNorm });
      // Each recording makes its own gradients, as a replayed step owns its
      // own: left on the parameters, the next backward would add into them.
      for (const p of optimizer.params) {
        if (p.grad) made.push(p.grad as Tensor);
        p.grad = undefined;
      }
    };
    return await profileStep<Owned>(backend, record, {
      kernels: options.kernels ?? true,
      repetitions: options.repetitions ?? 10,
    });
  } finally {
    optimizer.dispose();
    work.dispose();
  }
}
