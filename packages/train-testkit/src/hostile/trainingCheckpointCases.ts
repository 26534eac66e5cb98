import { createCpuBackend, type DType, type HostArray } from '@rayo/core';
import {
  AdamW,
  decodeSafetensors,
  encodeSafetensors,
  loadCheckpoint,
  MAX_CHECKPOINT_BYTES,
  MLP,
  readCheckpointFile,
  type StoredTensor,
  saveCheckpoint,
} from '@rayo/train';
import { fifo, type HostileCase, type HostileReader, put, sparse } from './hostileFiles.js';
import { rawSafetensors } from './safetensorsCases.js';

/** A small model and its optimizer on the cpu backend: what a checkpoint is loaded into. */
function target() {
  const backend = createCpuBackend();
  const model = new MLP(backend, [2, 3, 2]);
  return { model, optimizer: new AdamW(model.namedParameters()) };
}

/** Reads a checkpoint file and loads it into a fresh model and optimizer. */
export const trainingCheckpointReader: HostileReader = {
  name: 'readCheckpointFile + loadCheckpoint',
  // loadCheckpoint takes bytes: its refusals name the tensor or key, not the file.
  namesFile: false,
  async read(path) {
    loadCheckpoint(await readCheckpointFile(path), target());
  },
};

/** A valid checkpoint of `target()`'s model and optimizer, as tensors and metadata to spoil. */
async function valid(): Promise<{ tensors: Map<string, StoredTensor>; metadata: Record<string, string> }> {
  const bytes = await saveCheckpoint({ ...target(), step: 3 });
  return decodeSafetensors(bytes);
}

function spoiled(
  name: string,
  spoil: (tensors: Map<string, StoredTensor>, metadata: Record<string, string>) => void,
  mentions: RegExp,
): HostileCase {
  return {
    kind: 'training checkpoint: contents',
    name,
    reader: trainingCheckpointReader,
    mentions,
    async write(dir) {
      const { tensors, metadata } = await valid();
      spoil(tensors, metadata);
      return put(dir, 'run.safetensors', encodeSafetensors(tensors, metadata));
    },
  };
}

const firstOf = (tensors: Map<string, StoredTensor>, prefix: string): string =>
  [...tensors.keys()].find((k) => k.startsWith(prefix))!;

function retyped(t: StoredTensor, dtype: DType, data: HostArray): StoredTensor {
  return { dtype, shape: t.shape, data };
}

/** Training checkpoints a careful loader refuses. */
export function trainingCheckpointCases(): HostileCase[] {
  const file = (name: string, write: (dir: string) => Promise<string>, mentions?: RegExp): HostileCase => ({
    kind: 'training checkpoint: file',
    name,
    reader: trainingCheckpointReader,
    mentions,
    write,
  });
  return [
    spoiled('not a rayo checkpoint', (_, m) => delete m.format, /format/),
    spoiled('step -1', (_, m) => Object.assign(m, { step: '-1' }), /step/),
    spoiled('step 1e400', (_, m) => Object.assign(m, { step: '1e400' }), /step/),
    spoiled('optimizer.step absent', (_, m) => delete m['optimizer.step'], /optimizer\.step/),
    spoiled('another optimizer', (_, m) => Object.assign(m, { optimizer: 'sgd' }), /optimizer/),
    spoiled('a parameter missing', (t) => t.delete(firstOf(t, 'model.')), /parameter/),
    spoiled(
      'a parameter of another shape',
      (t) => {
        const name = firstOf(t, 'model.');
        t.set(name, { dtype: 'f32', shape: [1], data: new Float32Array(1) });
      },
      /does not fit/,
    ),
    spoiled(
      'a parameter stored as i32',
      (t) => {
        const name = firstOf(t, 'model.');
        const old = t.get(name)!;
        t.set(name, retyped(old, 'i32', new Int32Array(old.data.length)));
      },
      /does not fit/,
    ),
    spoiled(
      'an optimizer state tensor missing',
      (t) => t.delete(firstOf(t, 'optimizer.')),
      /optimizer state/,
    ),
    spoiled(
      'an optimizer state tensor of another shape',
      (t) => t.set(firstOf(t, 'optimizer.'), { dtype: 'f32', shape: [1], data: new Float32Array(1) }),
      /optimizer state/,
    ),
    file(
      'a tensor of dtype F64',
      (dir) =>
        put(
          dir,
          'run.safetensors',
          rawSafetensors(
            '{"__metadata__":{"format":"rayo-train/1","step":"1"},"model.w":{"dtype":"F64","shape":[2],"data_offsets":[0,16]}}',
          ),
        ),
      /dtype/,
    ),
    file('truncated', async (dir) => {
      const bytes = await saveCheckpoint({ ...target(), step: 1 });
      return put(dir, 'run.safetensors', bytes.subarray(0, bytes.length - 5));
    }),
    file('a FIFO in its place', (dir) => fifo(dir, 'run.safetensors'), /regular file/),
    file(
      'a folder in its place',
      async (dir) => (await put(dir, 'run.safetensors/x', '')).replace(/\/x$/, ''),
      /regular file/,
    ),
    file('missing', async (dir) => `${dir}/absent.safetensors`, /ENOENT/),
    file(
      'larger than the loader takes (sparse)',
      (dir) => sparse(dir, 'run.safetensors', MAX_CHECKPOINT_BYTES + 1),
      /larger than/,
    ),
  ];
}
