import {
  type Backend,
  createCpuBackend,
  type DType,
  type HostArray,
  type Shape,
  type Tensor,
} from '@rayo/core';
import type {
  ActivationName,
  BlockCheckpointing,
  Module,
  Optimizer,
  Tape,
  TrainPrecision,
  Variable,
} from '@rayo/train';
import { AdamW, autograd, CausalLM, checkpointingName, MLP, Rng, SGD, trainStep } from '@rayo/train';
import { lossScalerFor } from './lossScaling.js';

/** A classifier on random features: an MLP of `sizes`, cross-entropy over `batch` rows. */
export interface MlpWorkloadSpec {
  readonly kind: 'mlp';
  readonly sizes: readonly number[];
  readonly activation: ActivationName;
  readonly batch: number;
  /** The matrix products' precision policy (default 'f32'). */
  readonly precision?: TrainPrecision;
}

/** A causal language model (see CausalLM) on `batch` random sequences of `seq` tokens. */
export interface TransformerWorkloadSpec {
  readonly kind: 'transformer';
  readonly vocab: number;
  readonly dim: number;
  readonly heads: number;
  /** SwiGLU width, stated so that another framework builds the same shapes. */
  readonly hidden: number;
  readonly blocks: number;
  readonly seq: number;
  readonly batch: number;
  /** The matrix products' precision policy (default 'f32'). */
  readonly precision?: TrainPrecision;
  /** Which blocks recompute their forward in backward (default 'none'; see `BlockCheckpointing`). */
  readonly checkpoint?: BlockCheckpointing;
}

/** A model and its data, described in plain numbers (the PyTorch baseline reads the same JSON). */
export type WorkloadSpec = MlpWorkloadSpec | TransformerWorkloadSpec;

/** One input of a step: its host data, shape and dtype. */
export interface WorkloadInput {
  readonly data: HostArray;
  readonly shape: Shape;
  readonly dtype: DType;
}

/** A model with its data on a backend, and the loss of one step. */
export interface Workload {
  readonly spec: WorkloadSpec;
  readonly model: Module;
  /** The step's data on the host (features and labels, or token ids and targets). */
  readonly batch: Readonly<Record<string, WorkloadInput>>;
  /** The same data uploaded once: device-resident inputs, valid until `dispose`. */
  readonly tensors: Readonly<Record<string, Tensor>>;
  /** The loss on the uploaded data. */
  loss(tape: Tape): Variable;
  /** The loss on given tensors holding the inputs of `batch` (a replayed step's fixed inputs). */
  lossOn(tape: Tape, inputs: Readonly<Record<string, Tensor>>): Variable;
  dispose(): void;
}

export type OptimizerKind = 'adamw' | 'sgd';

/**
 * A short, stable name of a workload, e.g. `mlp-784x256x10-b256`, or
 * `transformer-…-bf16-ckpt-blocks` with a precision and checkpointing.
 */
export function workloadId(spec: WorkloadSpec): string {
  const shape =
    spec.kind === 'mlp'
      ? `mlp-${spec.sizes.join('x')}-b${spec.batch}`
      : `transformer-v${spec.vocab}-d${spec.dim}-h${spec.heads}-l${spec.blocks}-t${spec.seq}-b${spec.batch}`;
  const precise = (spec.precision ?? 'f32') === 'f32' ? shape : `${shape}-${spec.precision}`;
  const checkpoint = spec.kind === 'transformer' ? checkpointingName(spec.checkpoint ?? 'none') : 'none';
  return checkpoint === 'none' ? precise : `${precise}-ckpt-${checkpoint}`;
}

/** Training samples one step consumes: rows for an MLP, sequences for a language model. */
export function samplesPerStep(spec: WorkloadSpec): number {
  return spec.batch;
}

/** Tokens one step consumes (sequences × their length), or undefined for an MLP. */
export function tokensPerStep(spec: WorkloadSpec): number | undefined {
  return spec.kind === 'transformer' ? spec.batch * spec.seq : undefined;
}

/**
 * Model FLOPs of one training step (forward and backward, the optimizer
 * aside), as model FLOPs utilisation counts them: 6 per weight of a matrix
 * product per row (2 forward, 4 backward), and for a language model also
 * attention's scores and weighted values, 12 · blocks · dim · seq per token
 * (the full T × T products, as PaLM counts them). The embedding lookup,
 * norms, softmax and elementwise work are not counted, nor is the forward
 * that checkpointed blocks run again (model FLOPs, not hardware FLOPs).
 */
export function trainingFlopsPerStep(spec: WorkloadSpec): number {
  if (spec.kind === 'mlp') {
    const weights = spec.sizes.slice(1).reduce((n, out, i) => n + spec.sizes[i]! * out, 0);
    return 6 * weights * spec.batch;
  }
  const { dim, hidden, blocks, vocab, seq, batch } = spec;
  const weights = blocks * (4 * dim * dim + 3 * dim * hidden) + dim * vocab;
  const tokens = seq * batch;
  return 6 * weights * tokens + 12 * blocks * dim * seq * tokens;
}

/**
 * Builds the model from `seed` and uploads the data it is trained on (drawn
 * from the same generator after the parameters), so that every backend gets
 * the same numbers.
 */
export function buildWorkload(backend: Backend, spec: WorkloadSpec, seed: number): Workload {
  const rng = new Rng(seed);
  if (spec.kind === 'mlp') {
    const { sizes, batch } = spec;
    const features = sizes[0]!;
    const classes = sizes[sizes.length - 1]!;
    const model = new MLP(backend, sizes, { activation: spec.activation, rng }).setPrecision(
      spec.precision ?? 'f32',
    );
    const data = {
      x: { data: rng.normalArray(batch * features), shape: [batch, features], dtype: 'f32' as const },
      targets: {
        data: Int32Array.from({ length: batch }, () => rng.int(classes)),
        shape: [batch],
        dtype: 'i32' as const,
      },
    };
    const x = backend.upload(data.x.data, data.x.shape);
    const targets = backend.upload(data.targets.data, data.targets.shape, 'i32');
    const lossOn = (tape: Tape, t: Readonly<Record<string, Tensor>>) =>
      autograd.crossEntropy(tape, model.forward(tape, tape.constant(t.x!)), t.targets!);
    return {
      spec,
      model,
      batch: data,
      tensors: { x, targets },
      loss: (tape) => lossOn(tape, { x, targets }),
      lossOn,
      dispose: () => {
        model.dispose();
        x.dispose();
        targets.dispose();
      },
    };
  }
  const { vocab, seq, batch } = spec;
  const model = new CausalLM(backend, {
    ...spec,
    rng,
    precision: spec.precision ?? 'f32',
    checkpoint: spec.checkpoint ?? 'none',
  });
  const ids = Int32Array.from({ length: seq * batch }, () => rng.int(vocab));
  // A learnable rule: the next token is a fixed function of the current one.
  const next = Int32Array.from(ids, (id) => (3 * id + 1) % vocab);
  const idsTensor: Tensor = backend.upload(ids, [seq, batch], 'i32');
  const targets = backend.upload(next, [seq * batch], 'i32');
  const lossOn = (tape: Tape, t: Readonly<Record<string, Tensor>>) =>
    autograd.crossEntropy(tape, model.forward(tape, t.ids!), t.targets!);
  return {
    spec,
    model,
    batch: {
      ids: { data: ids, shape: [seq, batch], dtype: 'i32' },
      targets: { data: next, shape: [seq * batch], dtype: 'i32' },
    },
    tensors: { ids: idsTensor, targets },
    loss: (tape) => lossOn(tape, { ids: idsTensor, targets }),
    lossOn,
    dispose: () => {
      model.dispose();
      idsTensor.dispose();
      targets.dispose();
    },
  };
}

export function optimizerFor(model: Module, kind: OptimizerKind, lr: number | undefined): Optimizer {
  return kind === 'adamw'
    ? new AdamW(model.namedParameters(), { lr: lr ?? 1e-2 })
    : new SGD(model.namedParameters(), { lr: lr ?? 1e-1, momentum: 0.9 });
}

/** The same structure as `spec` at the smallest sizes: it runs the same kernels. */
function miniature(spec: WorkloadSpec): WorkloadSpec {
  if (spec.kind === 'mlp') return { ...spec, sizes: spec.sizes.map(() => 4), batch: 2 };
  return { ...spec, vocab: 8, dim: 2 * spec.heads, hidden: 4, seq: 3, batch: 2 };
}

export interface StepKernelOptions {
  readonly optimizer: OptimizerKind;
  /** Whether the step clips (or reads) the global gradient norm. */
  readonly clipNorm?: number;
}

/**
 * The kernels one training step of `spec` runs, found by one step of a
 * miniature of it on a cpu backend. Training code picks kernels by structure,
 * never by backend or size, so every backend runs these.
 */
export async function trainingKernels(spec: WorkloadSpec, options: StepKernelOptions): Promise<string[]> {
  const cpu = createCpuBackend();
  try {
    const work = buildWorkload(cpu, miniature(spec), 0);
    const optimizer = optimizerFor(work.model, options.optimizer, undefined);
    const lossScaler = options.optimizer === 'adamw' ? lossScalerFor(cpu, spec) : undefined;
    const kernels = new Set<string>();
    await trainStep({
      backend: cpu,
      optimizer,
      loss: (tape) => work.loss(tape),
      clipNorm: options.clipNorm,
      readGradNorm: true,
      kernelsUsed: kernels,
      ...(lossScaler ? { lossScaler } : {}),
    });
    optimizer.dispose();
    lossScaler?.dispose();
    work.dispose();
    return [...kernels].sort();
  } finally {
    cpu.dispose();
  }
}

/** The kernels of `kernels` that `backend` does not implement, sorted. */
export function missingKernels(backend: Backend, kernels: Iterable<string>): string[] {
  return [...kernels].filter((k) => !backend.supports(k)).sort();
}
