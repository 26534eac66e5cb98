import { formatShape, InvalidArgumentError, RayoError, ShapeError, shapesEqual } from '@rayo/core';
import { writeFileAtomically } from '../io/atomicWrite.js';
import { fileError } from '../io/fileError.js';
import type { Parameter } from '../nn/module.js';
import type { LossScaler } from '../optim/lossScaler.js';
import type { HostTensor, Optimizer } from '../optim/optimizer.js';
import { openNodeFile, readWholeFile } from './randomAccessFile.js';
import { decodeSafetensors, encodeSafetensors, type StoredTensor } from './safetensors.js';

/** Anything with named parameters: a `Module`, or a plain object around a list. */
export interface HasParameters {
  namedParameters(): [string, Parameter][];
}

export interface CheckpointContents {
  readonly model: HasParameters;
  readonly optimizer?: Optimizer;
  /** A half-precision run's loss scaler: its scale and count of finite steps travel with the checkpoint. */
  readonly lossScaler?: LossScaler;
  /** Training steps completed. */
  readonly step: number;
  /** Extra metadata (string values). */
  readonly metadata?: Readonly<Record<string, string>>;
}

export interface LoadedCheckpoint {
  readonly step: number;
  readonly metadata: Record<string, string>;
}

export const CHECKPOINT_FORMAT = 'rayo-train/1';
/** Largest checkpoint `readCheckpointFile` reads whole (what one Node read and `loadCheckpoint`'s bytes can hold). */
export const MAX_CHECKPOINT_BYTES = 2 ** 31 - 1;
const MODEL = 'model.';
const OPTIMIZER = 'optimizer.';
const LOSS_SCALE = 'lossScaler.scale';
const LOSS_GROWTH = 'lossScaler.growth';

/**
 * Reads the parameters (`model.<name>`) and the optimizer's state
 * (`optimizer.<name>.<slot>`, whole: a sharded optimizer gathers its state,
 * so every rank calls this) from the device and serialises them as
 * safetensors; the step, the optimizer's kind, step count and hyperparameters
 * go into `__metadata__`.
 */
export async function saveCheckpoint(contents: CheckpointContents): Promise<Uint8Array> {
  // Parameters a step is still gathering are read once the gathers are done.
  contents.optimizer?.settle();
  const tensors = new Map<string, StoredTensor>();
  for (const [name, p] of contents.model.namedParameters()) {
    tensors.set(`${MODEL}${name}`, { dtype: p.dtype, shape: p.shape, data: await p.value.read() });
  }
  const metadata: Record<string, string> = {
    ...contents.metadata,
    format: CHECKPOINT_FORMAT,
    step: String(contents.step),
  };
  const optimizer = contents.optimizer;
  if (optimizer) {
    for (const [name, t] of await optimizer.readState()) tensors.set(`${OPTIMIZER}${name}`, t);
    metadata.optimizer = optimizer.kind;
    metadata['optimizer.step'] = String(optimizer.stepCount);
    metadata['optimizer.lr'] = String(optimizer.lr);
    metadata['optimizer.hyperparameters'] = JSON.stringify(optimizer.hyperparameters());
  }
  const scaler = contents.lossScaler;
  if (scaler) {
    tensors.set(LOSS_SCALE, { dtype: 'f32', shape: [1], data: await scaler.scale.read() });
    tensors.set(LOSS_GROWTH, { dtype: 'i32', shape: [1], data: await scaler.growth.read() });
  }
  return encodeSafetensors(tensors, metadata);
}

function integerMeta(metadata: Record<string, string>, key: string): number {
  const value = Number(metadata[key]);
  if (!Number.isInteger(value) || value < 0) {
    throw new RayoError('checkpoint metadata is not a step count', {
      operation: 'loadCheckpoint',
      argument: key,
      expected: 'a non-negative integer',
      actual: JSON.stringify(metadata[key]),
    });
  }
  return value;
}

/**
 * Restores parameters (copied into the existing tensors on the device) and,
 * when given, the optimizer's state and step count. Every parameter must be
 * present with its shape.
 */
export function loadCheckpoint(
  bytes: Uint8Array,
  target: {
    readonly model: HasParameters;
    readonly optimizer?: Optimizer;
    readonly lossScaler?: LossScaler;
  },
): LoadedCheckpoint {
  const { tensors, metadata } = decodeSafetensors(bytes);
  if (metadata.format !== CHECKPOINT_FORMAT) {
    throw new RayoError('not a rayo training checkpoint', {
      operation: 'loadCheckpoint',
      argument: '__metadata__.format',
      expected: CHECKPOINT_FORMAT,
      actual: JSON.stringify(metadata.format),
    });
  }
  const step = integerMeta(metadata, 'step');
  const params = target.model.namedParameters();
  for (const [name, p] of params) {
    const stored = tensors.get(`${MODEL}${name}`);
    if (!stored) {
      throw new InvalidArgumentError('the checkpoint has no tensor for a parameter', {
        operation: 'loadCheckpoint',
        argument: name,
        expected: `${MODEL}${name} of shape ${formatShape(p.shape)}`,
        actual: 'nothing',
      });
    }
    if (!shapesEqual(stored.shape, p.shape) || stored.dtype !== p.dtype) {
      throw new ShapeError('a stored parameter does not fit the model', {
        operation: 'loadCheckpoint',
        argument: name,
        expected: `${p.dtype}${formatShape(p.shape)}`,
        actual: `${stored.dtype}${formatShape(stored.shape)}`,
      });
    }
  }
  const optimizer = target.optimizer;
  if (optimizer && metadata.optimizer !== optimizer.kind) {
    throw new RayoError('the checkpoint holds another optimizer’s state', {
      operation: 'loadCheckpoint',
      argument: 'optimizer',
      expected: optimizer.kind,
      actual: JSON.stringify(metadata.optimizer),
    });
  }
  const state = new Map<string, HostTensor>();
  let optimizerStep = 0;
  if (optimizer) {
    for (const [name, t] of tensors)
      if (name.startsWith(OPTIMIZER)) state.set(name.slice(OPTIMIZER.length), t);
    optimizer.checkState(state);
    optimizerStep = integerMeta(metadata, 'optimizer.step');
  }
  const scalerState = target.lossScaler ? lossScalerState(tensors) : undefined;
  // Everything is checked before anything is written.
  for (const [name, p] of params) {
    const stored = tensors.get(`${MODEL}${name}`)!;
    const backend = p.value.backend;
    const staged = backend.upload(stored.data, stored.shape, stored.dtype);
    backend.copy(staged, p.value);
    staged.dispose();
  }
  if (optimizer) {
    optimizer.loadState(state, optimizerStep);
    const lr = Number(metadata['optimizer.lr']);
    if (Number.isFinite(lr)) optimizer.lr = lr;
  }
  if (target.lossScaler && scalerState) {
    const { scale, growth } = target.lossScaler;
    scale.backend.write(scale, scalerState.scale.data);
    growth.backend.write(growth, scalerState.growth.data);
  }
  return { step, metadata };
}

/**
 * A loss scaler's stored scale (a positive finite f32) and count of finite
 * steps (a non-negative i32); a run that scales its loss resumes only from a
 * checkpoint that holds them.
 */
function lossScalerState(tensors: ReadonlyMap<string, StoredTensor>): {
  scale: StoredTensor;
  growth: StoredTensor;
} {
  const scale = tensors.get(LOSS_SCALE);
  const growth = tensors.get(LOSS_GROWTH);
  const fits = (t: StoredTensor | undefined, dtype: string) =>
    t !== undefined && t.dtype === dtype && shapesEqual(t.shape, [1]);
  if (!fits(scale, 'f32') || !fits(growth, 'i32')) {
    throw new InvalidArgumentError('the checkpoint has no loss scaler state', {
      operation: 'loadCheckpoint',
      argument: 'lossScaler',
      expected: `${LOSS_SCALE} f32[1] and ${LOSS_GROWTH} i32[1]`,
      actual: [scale, growth].map((t) => (t ? `${t.dtype}${formatShape(t.shape)}` : 'nothing')).join(' and '),
    });
  }
  const s = Number(scale!.data[0]);
  const g = Number(growth!.data[0]);
  if (!(Number.isFinite(s) && s > 0) || !(Number.isInteger(g) && g >= 0)) {
    throw new RayoError('the checkpoint holds an invalid loss scaler state', {
      operation: 'loadCheckpoint',
      argument: 'lossScaler',
      expected: 'a positive finite scale and a non-negative count of finite steps',
      actual: `scale ${s}, count ${g}`,
    });
  }
  return { scale: scale!, growth: growth! };
}

/**
 * Writes bytes to a file (Node), creating its folder: aside, flushed, then
 * renamed, so that an interrupted save leaves the previous checkpoint whole.
 */
export async function writeCheckpointFile(path: string, bytes: Uint8Array): Promise<void> {
  const { mkdir } = await import('node:fs/promises');
  const { dirname } = await import('node:path');
  try {
    await mkdir(dirname(path), { recursive: true });
  } catch (error) {
    throw fileError(
      'writeCheckpointFile',
      path,
      'could not create the folder of the file',
      'a writable folder',
      error,
    );
  }
  await writeFileAtomically(path, bytes, 'writeCheckpointFile');
}

/** Reads a checkpoint file (Node): a regular file, read at offsets through `openNodeFile`. */
export async function readCheckpointFile(path: string): Promise<Uint8Array> {
  return readWholeFile(await openNodeFile(path), MAX_CHECKPOINT_BYTES, 'readCheckpointFile');
}
