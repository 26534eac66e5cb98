import { type Backend, type Tensor, UnsupportedOnBackendError } from '@rayo/core';
import { crossEntropy } from './autograd/ops/loss.js';
import { reshape } from './autograd/ops/shape.js';
import type { Tape, Variable } from './autograd/tape.js';
import { trainStep } from './loop/step.js';
import { Embedding } from './nn/embedding.js';
import { Linear } from './nn/linear.js';
import { MLP } from './nn/mlp.js';
import { Module } from './nn/module.js';
import { RMSNorm } from './nn/norm.js';
import { TransformerBlock } from './nn/transformer.js';
import { AdamW } from './optim/adamw.js';
import type { Optimizer } from './optim/optimizer.js';
import { SGD } from './optim/sgd.js';
import { Rng } from './random.js';

export type BackendFactory = () => Backend | Promise<Backend>;

export interface ParityOptions {
  /** Training steps on each backend (default 8). */
  readonly steps?: number;
  /** Seed of the initialisation and the data (default 0). */
  readonly seed?: number;
  /** 'mlp' (default): a 16-32-8 GELU MLP; 'transformer': a one-block causal LM with RoPE and SwiGLU. */
  readonly model?: 'mlp' | 'transformer';
  readonly optimizer?: 'adamw' | 'sgd';
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
  readonly gradNormA: number;
  readonly gradNormB: number;
}

export interface ParityReport {
  readonly passed: boolean;
  readonly backends: readonly [string, string];
  readonly model: 'mlp' | 'transformer';
  readonly steps: readonly ParityStep[];
  readonly maxLossDiff: number;
  readonly maxGradNormRelDiff: number;
  readonly lossTolerance: number;
  readonly gradNormTolerance: number;
  /** Kernels the training step runs. */
  readonly kernels: readonly string[];
  /** One line per step outside a tolerance. */
  readonly failures: readonly string[];
}

interface Workload {
  readonly model: Module;
  loss(tape: Tape): Variable;
  dispose(): void;
}

/** A one-block causal language model: embedding, a transformer block, a norm and a head. */
class TinyLM extends Module {
  readonly embed: Embedding;
  readonly block: TransformerBlock;
  readonly norm: RMSNorm;
  readonly head: Linear;

  constructor(backend: Backend, vocab: number, dim: number, rng: Rng) {
    super(backend);
    this.embed = this.addModule('embed', new Embedding(backend, vocab, dim, { rng, std: 0.5 }));
    this.block = this.addModule('block', new TransformerBlock(backend, { dim, heads: 2, rope: true, rng }));
    this.norm = this.addModule('norm', new RMSNorm(backend, dim));
    this.head = this.addModule('head', new Linear(backend, dim, vocab, { rng, bias: false }));
  }

  /** `ids` [T, B] → logits [T·B, vocab]. */
  forward(tape: Tape, ids: Tensor): Variable {
    const [t, b] = ids.shape as [number, number];
    const h = this.norm.forward(tape, this.block.forward(tape, this.embed.forward(tape, ids)));
    return this.head.forward(tape, reshape(tape, h, [t * b, this.embed.dim]));
  }
}

function workload(backend: Backend, kind: 'mlp' | 'transformer', seed: number): Workload {
  const rng = new Rng(seed);
  if (kind === 'mlp') {
    const [n, features, classes] = [32, 16, 8];
    const model = new MLP(backend, [features, 32, classes], { activation: 'gelu', rng });
    const x = backend.upload(rng.normalArray(n * features), [n, features]);
    const targets = backend.upload(
      Int32Array.from({ length: n }, () => rng.int(classes)),
      [n],
      'i32',
    );
    return {
      model,
      loss: (tape) => crossEntropy(tape, model.forward(tape, tape.constant(x)), targets),
      dispose: () => {
        model.dispose();
        x.dispose();
        targets.dispose();
      },
    };
  }
  const [vocab, dim, t, b] = [32, 16, 8, 2];
  const model = new TinyLM(backend, vocab, dim, rng);
  const ids = Int32Array.from({ length: t * b }, () => rng.int(vocab));
  // A learnable rule: the next token is a fixed function of the current one.
  const next = Int32Array.from(ids, (id) => (3 * id + 1) % vocab);
  const idsTensor = backend.upload(ids, [t, b], 'i32');
  const targets = backend.upload(next, [t * b], 'i32');
  return {
    model,
    loss: (tape) => crossEntropy(tape, model.forward(tape, idsTensor), targets),
    dispose: () => {
      model.dispose();
      idsTensor.dispose();
      targets.dispose();
    },
  };
}

function optimizerFor(model: Module, kind: 'adamw' | 'sgd', lr: number | undefined): Optimizer {
  return kind === 'adamw'
    ? new AdamW(model.namedParameters(), { lr: lr ?? 1e-2 })
    : new SGD(model.namedParameters(), { lr: lr ?? 1e-1, momentum: 0.9 });
}

async function run(
  backend: Backend,
  options: Required<Pick<ParityOptions, 'steps' | 'seed' | 'model' | 'optimizer' | 'clipNorm'>> & {
    lr: number | undefined;
  },
  kernelsUsed?: Set<string>,
): Promise<{ loss: number; gradNorm: number }[]> {
  const work = workload(backend, options.model, options.seed);
  const optimizer = optimizerFor(work.model, options.optimizer, options.lr);
  try {
    const out: { loss: number; gradNorm: number }[] = [];
    for (let i = 0; i < options.steps; i++) {
      const r = await trainStep({
        backend,
        optimizer,
        loss: (tape) => work.loss(tape),
        clipNorm: options.clipNorm,
        readGradNorm: true,
        kernelsUsed,
      });
      out.push({ loss: r.loss!, gradNorm: r.gradNorm! });
    }
    return out;
  } finally {
    optimizer.dispose();
    work.dispose();
  }
}

/**
 * Trains the same model, from the same seed on the same data, for the same
 * steps on two backends, and compares the losses (within `lossTolerance`,
 * absolute) and the global gradient norms (within `gradNormTolerance`,
 * relative) step by step. Backend A is the reference (usually cpu). Before
 * training on B, every kernel A's steps ran is checked against B, and a
 * missing one is an UnsupportedOnBackendError naming all of them. The gate
 * disposes the backends it creates.
 */
export async function parityGate(
  makeBackendA: BackendFactory,
  makeBackendB: BackendFactory,
  options: ParityOptions = {},
): Promise<ParityReport> {
  const settings = {
    steps: options.steps ?? 8,
    seed: options.seed ?? 0,
    model: options.model ?? 'mlp',
    optimizer: options.optimizer ?? 'adamw',
    clipNorm: options.clipNorm ?? 1,
    lr: options.lr,
  } as const;
  const lossTolerance = options.lossTolerance ?? 1e-3;
  const gradNormTolerance = options.gradNormTolerance ?? 0.05;
  const a = await makeBackendA();
  let b: Backend | undefined;
  try {
    const kernels = new Set<string>();
    const resultsA = await run(a, settings, kernels);
    b = await makeBackendB();
    const missing = [...kernels].filter((k) => !b!.supports(k)).sort();
    if (missing.length > 0) {
      throw new UnsupportedOnBackendError(
        `backend '${b.name}' lacks kernels the ${settings.model} training step runs: ${missing.join(', ')}`,
        { kernel: 'parityGate', argument: 'makeBackendB' },
      );
    }
    const resultsB = await run(b, settings);
    const steps: ParityStep[] = resultsA.map((ra, i) => ({
      step: i + 1,
      lossA: ra.loss,
      lossB: resultsB[i]!.loss,
      gradNormA: ra.gradNorm,
      gradNormB: resultsB[i]!.gradNorm,
    }));
    const failures: string[] = [];
    let maxLossDiff = 0;
    let maxGradNormRelDiff = 0;
    for (const s of steps) {
      const lossDiff = Math.abs(s.lossA - s.lossB);
      const normDiff =
        Math.abs(s.gradNormA - s.gradNormB) / Math.max(Math.abs(s.gradNormA), Number.MIN_VALUE);
      // NaN fails both comparisons.
      maxLossDiff = Math.max(maxLossDiff, Number.isNaN(lossDiff) ? Number.POSITIVE_INFINITY : lossDiff);
      maxGradNormRelDiff = Math.max(
        maxGradNormRelDiff,
        Number.isNaN(normDiff) ? Number.POSITIVE_INFINITY : normDiff,
      );
      if (!(lossDiff <= lossTolerance)) {
        failures.push(`step ${s.step}: loss ${s.lossA} vs ${s.lossB} (|Δ| ${lossDiff} > ${lossTolerance})`);
      }
      if (!(normDiff <= gradNormTolerance)) {
        failures.push(
          `step ${s.step}: gradient norm ${s.gradNormA} vs ${s.gradNormB} (relative ${normDiff} > ${gradNormTolerance})`,
        );
      }
    }
    return {
      passed: failures.length === 0,
      backends: [a.name, b.name],
      model: settings.model,
      steps,
      maxLossDiff,
      maxGradNormRelDiff,
      lossTolerance,
      gradNormTolerance,
      kernels: [...kernels].sort(),
      failures,
    };
  } finally {
    a.dispose();
    b?.dispose();
  }
}
