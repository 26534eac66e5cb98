import type { Backend, Tensor } from '@rayo/core';
import type { LlamaModel } from '@rayo/train';
import {
  AdamW,
  autograd,
  CausalLM,
  type CheckpointHook,
  Rng,
  Tape,
  type TrainPrecision,
  type TrainResult,
  train,
  warmupCosine,
} from '@rayo/train';
import { lossScalerFor } from '../../train/lossScaling.js';
import {
  batchLayout,
  coveringWindows,
  type NameSplit,
  randomWindows,
  splitNames,
  Vocabulary,
} from './data.js';
import { causalLMDecoder } from './decoder.js';

/** The model, data and optimisation of a names run. */
export interface NamesSettings {
  readonly dim: number;
  readonly heads: number;
  readonly blocks: number;
  /** SwiGLU width. */
  readonly hidden: number;
  /** Standard deviation of the character embeddings' initialisation. */
  readonly embedStd: number;
  /** Characters of context a training window holds. */
  readonly context: number;
  readonly batch: number;
  readonly steps: number;
  /** Peak learning rate of the warm-up and cosine schedule. */
  readonly lr: number;
  readonly weightDecay: number;
  /** Validation loss every this many steps (and after the last). */
  readonly evalEvery: number;
  readonly seed: number;
  readonly validationFraction: number;
  /** The matrix products' precision policy; weights, gradients and AdamW stay f32 ('f16' trains with a LossScaler). */
  readonly precision: TrainPrecision;
}

/**
 * About 7 600 training names are some 47 000 characters: a larger model or a
 * longer run memorises them (training loss far under the validation loss,
 * which then rises), so the defaults are small and the cosine schedule ends
 * where the validation loss stops falling.
 */
export const NAMES_DEFAULTS: NamesSettings = {
  dim: 96,
  heads: 4,
  blocks: 2,
  hidden: 256,
  embedStd: 1,
  context: 32,
  batch: 64,
  steps: 500,
  lr: 3e-3,
  weightDecay: 0.1,
  evalEvery: 100,
  seed: 0,
  validationFraction: 0.1,
  precision: 'f32',
};

/** The losses of a run, in nats per character. */
export interface NamesCurve {
  readonly train: { step: number; loss: number }[];
  readonly validation: { step: number; loss: number }[];
}

export interface NamesRun {
  readonly model: CausalLM;
  readonly vocab: Vocabulary;
  readonly split: NameSplit;
  readonly curve: NamesCurve;
  readonly result: TrainResult;
  /** The lowest validation loss and its step. */
  readonly best: { readonly step: number; readonly loss: number };
}

export interface NamesHooks {
  /** Progress bar label, or false for none. */
  readonly progress?: string | false;
  readonly checkpoint?: CheckpointHook;
}

/**
 * Mean cross-entropy of `model` over every target of `stream` (nats per
 * character): covering windows of `context` characters, each target once,
 * run `batch` windows at a time without gradients.
 */
export async function streamLoss(
  backend: Backend,
  model: CausalLM,
  stream: Int32Array,
  context: number,
  batch: number,
): Promise<number> {
  const groups = new Map<number, Int32Array[]>();
  for (const w of coveringWindows(stream, context)) {
    const list = groups.get(w.length - 1) ?? [];
    list.push(w);
    groups.set(w.length - 1, list);
  }
  let total = 0;
  let count = 0;
  for (const [length, windows] of groups) {
    for (let start = 0; start < windows.length; start += batch) {
      const chunk = windows.slice(start, start + batch);
      const { ids, targets } = batchLayout(chunk, length);
      using tape = new Tape(backend, { grad: false });
      using idsTensor = backend.upload(ids, [length, chunk.length], 'i32');
      using targetTensor = backend.upload(targets, [targets.length], 'i32');
      const loss = autograd.crossEntropy(tape, model.forward(tape, idsTensor), targetTensor);
      total += (await loss.value.read())[0]! * targets.length;
      count += targets.length;
    }
  }
  return total / count;
}

/**
 * Trains a character-level CausalLM on the training names (random windows
 * of their stream) with AdamW, a warm-up and cosine schedule and clipping at
 * 1, measuring the validation loss as it goes.
 */
export async function trainNames(
  backend: Backend,
  names: readonly string[],
  settings: NamesSettings,
  hooks: NamesHooks = {},
): Promise<NamesRun> {
  const split = splitNames(names, settings.seed, settings.validationFraction);
  const vocab = new Vocabulary([...split.train, ...split.validation]);
  const trainStream = vocab.encode(split.train);
  const validationStream = vocab.encode(split.validation);
  const { context, batch, steps } = settings;
  const model = new CausalLM(backend, {
    vocab: vocab.size,
    dim: settings.dim,
    heads: settings.heads,
    hidden: settings.hidden,
    blocks: settings.blocks,
    embedStd: settings.embedStd,
    seed: settings.seed,
    precision: settings.precision,
  });
  const optimizer = new AdamW(model.namedParameters(), {
    lr: settings.lr,
    weightDecay: settings.weightDecay,
    noDecay: (_name, p) => p.shape.length < 2,
  });
  const curve: NamesCurve = { train: [], validation: [] };
  let best = { step: 0, loss: Number.POSITIVE_INFINITY };
  // f16 products need dynamic loss scaling; the other policies keep f32's range.
  const lossScaler = lossScalerFor(backend, settings);
  try {
    const result = await train({
      backend,
      model,
      optimizer,
      ...(lossScaler ? { lossScaler } : {}),
      steps,
      // The windows of a step depend on the step alone.
      data: (step): { ids: Tensor; targets: Tensor } => {
        const windows = randomWindows(trainStream, context, batch, new Rng(settings.seed * 1_000_003 + step));
        const { ids, targets } = batchLayout(windows, context);
        return {
          ids: backend.upload(ids, [context, batch], 'i32'),
          targets: backend.upload(targets, [context * batch], 'i32'),
        };
      },
      release: (b) => {
        b.ids.dispose();
        b.targets.dispose();
      },
      loss: (tape, b) => autograd.crossEntropy(tape, model.forward(tape, b.ids), b.targets),
      lr: warmupCosine({
        lr: settings.lr,
        warmupSteps: Math.min(100, steps),
        totalSteps: steps,
        minLr: settings.lr / 20,
      }),
      clipNorm: 1,
      logEvery: Math.max(1, Math.min(25, Math.floor(steps / 4))),
      progress: hooks.progress === false ? false : { label: hooks.progress ?? 'names' },
      evaluate: {
        every: settings.evalEvery,
        run: async (step) => {
          const loss = await streamLoss(backend, model, validationStream, context, batch);
          curve.validation.push({ step, loss });
          if (loss < best.loss) best = { step, loss };
          return { validation: loss };
        },
      },
      onStep: (record) => {
        if (record.loss !== undefined) curve.train.push({ step: record.step, loss: record.loss });
      },
      ...(hooks.checkpoint ? { checkpoint: hooks.checkpoint } : {}),
    });
    return { model, vocab, split, curve, result, best };
  } catch (error) {
    model.dispose();
    throw error;
  } finally {
    optimizer.dispose();
    lossScaler?.dispose();
  }
}

/**
 * Samples names with the KV-cache decoder of `model` (`causalLMDecoder`):
 * from a separator, one character per decode step from softmax(logits /
 * temperature), until the next separator or `maxLength` characters. Name
 * `n` is drawn with seed `seed + n`.
 */
export async function sampleNames(
  model: CausalLM,
  vocab: Vocabulary,
  options: { count: number; seed: number; temperature?: number; maxLength?: number },
): Promise<string[]> {
  const maxLength = options.maxLength ?? 20;
  using decoder = disposable(causalLMDecoder(model, maxLength + 1));
  const out: string[] = [];
  for (let n = 0; n < options.count; n++) {
    const ids: number[] = [];
    for await (const id of decoder.model.generate([0], {
      maxNewTokens: maxLength,
      temperature: options.temperature ?? 1,
      seed: options.seed + n,
      stop: [0],
    })) {
      ids.push(id);
    }
    out.push(vocab.decode(ids));
  }
  return out;
}

function disposable(model: LlamaModel): { model: LlamaModel; [Symbol.dispose](): void } {
  return { model, [Symbol.dispose]: () => model.dispose() };
}
