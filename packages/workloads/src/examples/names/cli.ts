import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { type Backend, probeBackends, UnsupportedOnBackendError } from '@rayo/core';
import { checkTrainPrecision } from '@rayo/train';
import { createBackendFromEnvironment } from '../../backendFromEnvironment.js';
import { missingKernels, trainingKernels } from '../../train/workload.js';
import { firstNames } from './corpus.js';
import { lossCurveSvg } from './lossCurve.js';
import { NAMES_DEFAULTS, type NamesSettings, sampleNames, trainNames } from './train.js';

// Trains a character-level transformer on English first names, then samples new ones.

/** The validation loss the example is held to, in nats per character. */
export const NAMES_TARGET = 2.05;

export const NAMES_USAGE = `Usage: names [options]

Trains a character-level transformer language model on about 8 400 English
first names (a 90/10 split by the seed), writes the loss curve, a checkpoint
and a JSON report into --out, and samples new names.

  --backend NAME      cuda, wgpu or cpu (default: the first that runs here)
  --steps N           training steps (default ${NAMES_DEFAULTS.steps})
  --batch N           windows per step (default ${NAMES_DEFAULTS.batch})
  --context N         characters per window (default ${NAMES_DEFAULTS.context})
  --dim N, --heads N, --blocks N, --hidden N   the model (default ${NAMES_DEFAULTS.dim}, ${NAMES_DEFAULTS.heads}, ${NAMES_DEFAULTS.blocks}, ${NAMES_DEFAULTS.hidden})
  --lr X              peak learning rate (default ${NAMES_DEFAULTS.lr})
  --embed-std X       standard deviation of the embeddings at initialisation (default ${NAMES_DEFAULTS.embedStd})
  --eval-every N      validation loss every N steps (default ${NAMES_DEFAULTS.evalEvery})
  --seed N            split, initialisation and batches (default ${NAMES_DEFAULTS.seed})
  --precision P       f32, tf32, bf16 or f16: the matrix products' precision;
                      weights, gradients and AdamW stay f32, f16 trains with
                      dynamic loss scaling (default ${NAMES_DEFAULTS.precision})
  --samples N         names to sample at the end (default 20)
  --out DIR           where the report goes (default names-results)`;

function integer(name: string, text: string, min: number): number {
  const value = Number(text);
  if (!Number.isInteger(value) || value < min)
    throw new Error(`--${name} must be an integer >= ${min}, got ${text}`);
  return value;
}

export interface NamesCliOptions {
  readonly backend: string | undefined;
  readonly settings: NamesSettings;
  readonly samples: number;
  readonly out: string;
}

export function parseNamesArgs(argv: readonly string[]): NamesCliOptions {
  const d = NAMES_DEFAULTS;
  const { values } = parseArgs({
    args: [...(argv[0] === '--' ? argv.slice(1) : argv)],
    options: {
      backend: { type: 'string' },
      steps: { type: 'string', default: String(d.steps) },
      batch: { type: 'string', default: String(d.batch) },
      context: { type: 'string', default: String(d.context) },
      dim: { type: 'string', default: String(d.dim) },
      heads: { type: 'string', default: String(d.heads) },
      blocks: { type: 'string', default: String(d.blocks) },
      hidden: { type: 'string', default: String(d.hidden) },
      'embed-std': { type: 'string', default: String(d.embedStd) },
      lr: { type: 'string', default: String(d.lr) },
      'eval-every': { type: 'string', default: String(d.evalEvery) },
      seed: { type: 'string', default: String(d.seed) },
      precision: { type: 'string', default: d.precision },
      samples: { type: 'string', default: '20' },
      out: { type: 'string', default: 'names-results' },
    },
  });
  const lr = Number(values.lr);
  if (!(lr > 0)) throw new Error(`--lr must be a positive number, got ${values.lr}`);
  const embedStd = Number(values['embed-std']);
  if (!(embedStd > 0)) throw new Error(`--embed-std must be a positive number, got ${values['embed-std']}`);
  return {
    backend: values.backend,
    settings: {
      ...d,
      steps: integer('steps', values.steps, 1),
      batch: integer('batch', values.batch, 1),
      context: integer('context', values.context, 1),
      dim: integer('dim', values.dim, 2),
      heads: integer('heads', values.heads, 1),
      blocks: integer('blocks', values.blocks, 1),
      hidden: integer('hidden', values.hidden, 1),
      embedStd,
      lr,
      evalEvery: integer('eval-every', values['eval-every'], 1),
      seed: integer('seed', values.seed, 0),
      precision: checkTrainPrecision(values.precision, 'names --precision'),
    },
    samples: integer('samples', values.samples, 0),
    out: values.out,
  };
}

/** The named backend, or the first of cuda, wgpu and cpu that runs here and has every kernel the step needs. */
async function chooseBackend(name: string | undefined, settings: NamesSettings): Promise<Backend> {
  const kernels = await trainingKernels(
    { kind: 'transformer', vocab: 28, ...settings, seq: settings.context },
    { optimizer: 'adamw', clipNorm: 1 },
  );
  for (const status of await probeBackends(name ? [name] : ['cuda', 'wgpu', 'cpu'])) {
    if (!status.available) {
      if (name) throw new UnsupportedOnBackendError(`backend '${name}' cannot run here: ${status.reason}`);
      console.error(`skipping ${status.name}: ${status.reason}`);
      continue;
    }
    const backend = await createBackendFromEnvironment(status.name);
    const missing = missingKernels(backend, kernels);
    if (missing.length === 0) return backend;
    backend.dispose();
    if (name) throw new UnsupportedOnBackendError(`backend '${name}' lacks kernels: ${missing.join(', ')}`);
    console.error(`skipping ${status.name}: it lacks ${missing.join(', ')}`);
  }
  throw new UnsupportedOnBackendError('no backend can train the names model here');
}

export async function namesMain(argv: readonly string[]): Promise<number> {
  if (argv.includes('--help')) {
    console.log(NAMES_USAGE);
    return 0;
  }
  const options = parseNamesArgs(argv);
  const { settings } = options;
  const backend = await chooseBackend(options.backend, settings);
  console.error(`backend: ${backend.name} (${backend.info.device})`);
  await mkdir(options.out, { recursive: true });
  const checkpoint = join(options.out, 'names.safetensors');
  const started = performance.now();
  try {
    const run = await trainNames(backend, firstNames(), settings, {
      progress: 'names',
      checkpoint: { every: settings.evalEvery, path: checkpoint, metadata: { model: 'names-char-lm' } },
    });
    const seconds = (performance.now() - started) / 1000;
    const final = run.curve.validation.at(-1)!;
    const samples = await sampleNames(run.model, run.vocab, {
      count: options.samples,
      seed: settings.seed + 1,
    });
    const title = `names: ${settings.blocks} blocks, d ${settings.dim}, ${settings.precision}, ${backend.name}`;
    await writeFile(
      join(options.out, 'loss.svg'),
      lossCurveSvg(
        title,
        [
          { name: 'training', color: '#1f77b4', points: run.curve.train },
          { name: 'validation', color: '#d62728', points: run.curve.validation },
        ],
        NAMES_TARGET,
      ),
    );
    const report = {
      schema: 'rayo-names/1',
      backend: backend.name,
      device: backend.info.device,
      settings,
      names: { train: run.split.train.length, validation: run.split.validation.length },
      vocabulary: run.vocab.chars.join(''),
      seconds,
      stepsPerSecond: run.result.stepsPerSecond,
      validationLoss: final.loss,
      best: run.best,
      target: NAMES_TARGET,
      curve: run.curve,
      samples,
    };
    await writeFile(join(options.out, 'report.json'), `${JSON.stringify(report, null, 2)}\n`);
    console.log(
      `validation loss ${final.loss.toFixed(4)} nats/char after ${settings.steps} steps ` +
        `(best ${run.best.loss.toFixed(4)} at step ${run.best.step}; target <= ${NAMES_TARGET}) ` +
        `on ${backend.name} in ${seconds.toFixed(1)} s (${run.result.stepsPerSecond.toFixed(1)} steps/s)`,
    );
    console.log(`samples: ${samples.join(', ')}`);
    console.log(`wrote ${options.out}: loss.svg, report.json, names.safetensors`);
    run.model.dispose();
    return 0;
  } finally {
    backend.dispose();
  }
}
