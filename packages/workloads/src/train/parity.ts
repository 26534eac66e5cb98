import { type Backend, UnsupportedOnBackendError } from '@rayo/core';
import { type TrainPrecision, trainStep } from '@rayo/train';
import { lossScalerFor } from './lossScaling.js';
import {
  buildWorkload,
  missingKernels,
  type OptimizerKind,
  optimizerFor,
  trainingKernels,
  type WorkloadSpec,
} from './workload.js';

export type BackendFactory = () => Backend | Promise<Backend>;

export interface ParityOptions {
  /** Training steps on each backend (default 8). */
  readonly steps?: number;
  /** Seed of the initialisation and the data (default 0). */
  readonly seed?: number;
  /** 'mlp' (default): a 16-32-8 GELU MLP; 'transformer': a one-block causal LM with RoPE and SwiGLU. */
  readonly model?: 'mlp' | 'transformer';
  /** A model to train instead of `model`'s parity model (e.g. one sized for tensor cores); its kind is the report's model. */
  readonly workload?: WorkloadSpec;
  /** The precision policies of run A and run B (default both 'f32'). */
  readonly precisions?: readonly [TrainPrecision, TrainPrecision];
  readonly optimizer?: OptimizerKind;
  readonly lr?: number;
  /** Clip the gradients to this global norm (default 1, so clipping is exercised). */
  readonly clipNorm?: number;
  /** Largest |loss A − loss B| at any step (default 1e-3). */
  readonly lossTolerance?: number;
  /** Largest |norm A − norm B| / norm A at any step (default 0.05). */
  readonly gradNormTolerance?: number;
}

export interface ParityStep {
  readonly step: number;
  readonly lossA: number;
  readonly lossB: number;
  /** |loss A − loss B|. */
  readonly lossDiff: number;
  readonly gradNormA: number;
  readonly gradNormB: number;
  /** |norm A − norm B| / norm A. */
  readonly gradNormRelDiff: number;
}

/** The loss and the global gradient norm (before clipping) of one step. */
export interface StepMeasurement {
  readonly loss: number;
  readonly gradNorm: number;
}

export interface ParityTolerances {
  readonly lossTolerance: number;
  readonly gradNormTolerance: number;
}

/** How two runs compare step by step. */
export interface ParityVerdict {
  readonly passed: boolean;
  readonly steps: readonly ParityStep[];
  readonly maxLossDiff: number;
  readonly maxGradNormRelDiff: number;
  /** One line per step outside a tolerance. */
  readonly failures: readonly string[];
}

/** The verdict of a parity run between two backends, with the tolerances it was judged by. */
export interface ParityReport extends ParityVerdict, ParityTolerances {
  readonly backends: readonly [string, string];
  readonly model: 'mlp' | 'transformer';
  /** Kernels the training step runs. */
  readonly kernels: readonly string[];
}

/** The parity models: small enough for a software GPU, with every kind of kernel a step runs. */
export const PARITY_WORKLOADS: Readonly<Record<'mlp' | 'transformer', WorkloadSpec>> = {
  mlp: { kind: 'mlp', sizes: [16, 32, 8], activation: 'gelu', batch: 32 },
  transformer: { kind: 'transformer', vocab: 32, dim: 16, heads: 2, hidden: 48, blocks: 1, seq: 8, batch: 2 },
};

type RunSettings = Required<
  Pick<ParityOptions, 'steps' | 'seed' | 'model' | 'optimizer' | 'clipNorm' | 'workload'>
> & {
  readonly lr: number | undefined;
};

async function run(
  backend: Backend,
  settings: RunSettings,
  precision: TrainPrecision,
): Promise<StepMeasurement[]> {
  const work = buildWorkload(backend, { ...settings.workload, precision }, settings.seed);
  const optimizer = optimizerFor(work.model, settings.optimizer, settings.lr);
  const lossScaler = lossScalerFor(backend, { precision });
  try {
    const out: StepMeasurement[] = [];
    for (let i = 0; i < settings.steps; i++) {
      // Under loss scaling the norm is the scaled gradients': compared unscaled, by the S of the step.
      const scale = lossScaler ? await lossScaler.readScale() : 1;
      const r = await trainStep({
        backend,
        optimizer,
        loss: (tape) => work.loss(tape),
        clipNorm: settings.clipNorm,
        readGradNorm: true,
        ...(lossScaler ? { lossScaler } : {}),
      });
      out.push({ loss: r.loss!, gradNorm: r.gradNorm! / scale });
    }
    return out;
  } finally {
    optimizer.dispose();
    lossScaler?.dispose();
    work.dispose();
  }
}

/**
 * Compares two runs of the same steps: the losses absolutely, the gradient
 * norms relative to run A's. A step that differs in length, or a NaN, fails.
 */
export function compareRuns(
  a: readonly StepMeasurement[],
  b: readonly StepMeasurement[],
  { lossTolerance, gradNormTolerance }: ParityTolerances,
): ParityVerdict {
  const failures: string[] = [];
  if (a.length !== b.length) failures.push(`run A has ${a.length} steps, run B ${b.length}`);
  // NaN fails every comparison; in the maxima it counts as infinitely far.
  const distance = (d: number): number => (Number.isNaN(d) ? Number.POSITIVE_INFINITY : d);
  const steps: ParityStep[] = a.slice(0, b.length).map((ra, i) => {
    const rb = b[i]!;
    const lossDiff = Math.abs(ra.loss - rb.loss);
    const gradNormRelDiff =
      Math.abs(ra.gradNorm - rb.gradNorm) / Math.max(Math.abs(ra.gradNorm), Number.MIN_VALUE);
    const step = i + 1;
    if (!(lossDiff <= lossTolerance)) {
      failures.push(`step ${step}: loss ${ra.loss} vs ${rb.loss} (|Δ| ${lossDiff} > ${lossTolerance})`);
    }
    if (!(gradNormRelDiff <= gradNormTolerance)) {
      failures.push(
        `step ${step}: gradient norm ${ra.gradNorm} vs ${rb.gradNorm} (relative ${gradNormRelDiff} > ${gradNormTolerance})`,
      );
    }
    return {
      step,
      lossA: ra.loss,
      lossB: rb.loss,
      lossDiff,
      gradNormA: ra.gradNorm,
      gradNormB: rb.gradNorm,
      gradNormRelDiff,
    };
  });
  return {
    passed: failures.length === 0,
    steps,
    maxLossDiff: Math.max(0, ...steps.map((s) => distance(s.lossDiff))),
    maxGradNormRelDiff: Math.max(0, ...steps.map((s) => distance(s.gradNormRelDiff))),
    failures,
  };
}

/**
 * Trains the same model, from the same seed on the same data, for the same
 * steps on two backends, and compares the losses (within `lossTolerance`,
 * absolute) and the global gradient norms (within `gradNormTolerance`,
 * relative to A's) step by step. Either backend may be the cpu reference or a
 * GPU. Before any training, the kernels of the step are checked against both
 * backends, and a missing one is an UnsupportedOnBackendError naming all of
 * them. The gate disposes the backends it creates.
 */
export async function parityGate(
  makeBackendA: BackendFactory,
  makeBackendB: BackendFactory,
  options: ParityOptions = {},
): Promise<ParityReport> {
  const model = options.workload?.kind ?? options.model ?? 'mlp';
  const settings: RunSettings = {
    steps: options.steps ?? 8,
    seed: options.seed ?? 0,
    model,
    workload: options.workload ?? PARITY_WORKLOADS[model],
    optimizer: options.optimizer ?? 'adamw',
    clipNorm: options.clipNorm ?? 1,
    lr: options.lr,
  };
  const tolerances: ParityTolerances = {
    lossTolerance: options.lossTolerance ?? 1e-3,
    gradNormTolerance: options.gradNormTolerance ?? 0.05,
  };
  const [precisionA, precisionB] = options.precisions ?? ['f32', 'f32'];
  const kernels = [
    ...new Set([
      ...(await trainingKernels({ ...settings.workload, precision: precisionA }, settings)),
      ...(await trainingKernels({ ...settings.workload, precision: precisionB }, settings)),
    ]),
  ].sort();
  const backends: Backend[] = [];
  try {
    for (const make of [makeBackendA, makeBackendB]) backends.push(await make());
    const [a, b] = backends as [Backend, Backend];
    const lacking = backends.map((backend) => missingKernels(backend, kernels));
    const short = [0, 1].filter((i) => lacking[i]!.length > 0);
    if (short.length > 0) {
      const lines = short.map(
        (i) =>
          `backend '${backends[i]!.name}' lacks kernels the ${settings.model} training step runs: ${lacking[i]!.join(', ')}`,
      );
      throw new UnsupportedOnBackendError(lines.join('; '), {
        operation: 'parityGate',
        argument: short.map((i) => ['makeBackendA', 'makeBackendB'][i]).join(', '),
      });
    }
    const verdict = compareRuns(
      await run(a, settings, precisionA),
      await run(b, settings, precisionB),
      tolerances,
    );
    return {
      ...verdict,
      backends: [a.name, b.name],
      model: settings.model,
      ...tolerances,
      kernels,
    };
  } finally {
    for (const backend of backends) backend.dispose();
  }
}
