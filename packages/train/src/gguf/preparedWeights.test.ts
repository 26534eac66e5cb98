import { createBackend, DTypeError, type QuantizedHostWeight, ShapeError } from '@rayo/core';
import { describe, expect, it } from 'vitest';
import { Rng } from '../random.js';
import { type PreparedTensor, type PreparedWeights, uploadPrepared } from './preparedWeights.js';
import { quantize } from './quantize.js';
import {
  ggufAsCoreFormat,
  q4_KAsQ4g32a,
  q5_0AsQ8g32,
  q5_1AsQ8g32a,
  q5_KAsQ8g32a,
  q6_KAsQ8g16,
} from './repack.js';

// uploadPrepared: kept parts are uploaded as they are, missing ones are
// repacked from the blocks and kept, parts in an older layout of the type are
// repacked anew, and parts of another tensor are refused by name before any
// upload.

/** A store in a Map, counting what it is asked. */
function mapStore(kept = new Map<string, QuantizedHostWeight>()) {
  const calls = { reads: 0, writes: 0 };
  const store: PreparedWeights = {
    read: async (name) => {
      calls.reads++;
      return kept.get(name);
    },
    write: async (name, weight) => {
      calls.writes++;
      kept.set(name, weight);
    },
    end: async () => {},
  };
  return { store, kept, calls };
}

const rows = 5;
const cols = 96;
const rng = new Rng(11);
const blocks = quantize(
  'Q4_0',
  Float32Array.from({ length: rows * cols }, () => rng.normal()),
);

function tensor(onBlocks: () => void = () => {}): PreparedTensor {
  return {
    name: 'blk.0.attn_q.weight',
    type: 'Q4_0',
    shape: [rows, cols],
    blocks: async () => {
      onBlocks();
      return blocks;
    },
  };
}

describe('uploadPrepared', () => {
  it('repacks and keeps a tensor the store lacks, then uploads the kept parts without reading blocks', async () => {
    const backend = await createBackend('cpu');
    const { store, kept, calls } = mapStore();
    let blockReads = 0;
    const upload = () =>
      uploadPrepared(
        backend,
        store,
        tensor(() => blockReads++),
      );
    const first = await upload();
    expect(calls).toEqual({ reads: 1, writes: 1 });
    expect(blockReads).toBe(1);
    const expected = ggufAsCoreFormat('Q4_0', blocks, rows, cols);
    expect(kept.get('blk.0.attn_q.weight')!.packed).toEqual(expected.packed);
    const second = await upload();
    expect(calls).toEqual({ reads: 2, writes: 1 });
    expect(blockReads).toBe(1);
    expect(second.format).toBe('q4g32');
    expect(await second.tensors.packed!.read()).toEqual(await first.tensors.packed!.read());
    expect(await second.tensors.scales!.read()).toEqual(new Uint16Array(expected.scales.buffer));
    backend.dispose();
  });

  it('refuses kept parts of another shape or length, naming the tensor', async () => {
    const backend = await createBackend('cpu');
    const right = ggufAsCoreFormat('Q4_0', blocks, rows, cols);
    const other = mapStore(new Map([['blk.0.attn_q.weight', { ...right, n: rows - 1 }]]));
    await expect(uploadPrepared(backend, other.store, tensor())).rejects.toThrow(ShapeError);
    await expect(uploadPrepared(backend, other.store, tensor())).rejects.toMatchObject({
      argument: 'blk.0.attn_q.weight',
      expected: `q4g32 [${rows}, ${cols}] (Q4_0 in the file)`,
    });
    const short = mapStore(
      new Map([['blk.0.attn_q.weight', { ...right, packed: right.packed.subarray(1) }]]),
    );
    const error = await uploadPrepared(backend, short.store, tensor()).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(DTypeError);
    expect(error).toMatchObject({
      argument: 'blk.0.attn_q.weight.packed',
      actual: `${right.packed.length - 1}`,
    });
    expect(backend.memory().liveTensors).toBe(0);
    backend.dispose();
  });

  for (const [type, older, today, parts] of [
    ['Q4_K', q4_KAsQ4g32a, 'q4k', ['offsets', 'packed', 'scales', 'zeros']],
    ['Q6_K', q6_KAsQ8g16, 'q6k', ['packed', 'scales', 'zeros']],
    ['Q5_K', q5_KAsQ8g32a, 'q5k', ['offsets', 'packed', 'scales', 'zeros']],
    ['Q5_0', q5_0AsQ8g32, 'q5g32', ['packed', 'scales']],
    ['Q5_1', q5_1AsQ8g32a, 'q5g32a', ['offsets', 'packed', 'scales']],
  ] as const) {
    it(`repacks a tensor kept in an older layout of its type (${type} as ${older(quantize(type, new Float32Array(256)), 1, 256).format}) onto today’s (${today})`, async () => {
      const backend = await createBackend('cpu');
      const k = 256;
      const blocks = quantize(
        type,
        Float32Array.from({ length: rows * k }, () => rng.normal()),
      );
      const { store, kept, calls } = mapStore(new Map([['blk.0.ffn_up.weight', older(blocks, rows, k)]]));
      let blockReads = 0;
      const weight = await uploadPrepared(backend, store, {
        name: 'blk.0.ffn_up.weight',
        type,
        shape: [rows, k],
        blocks: async () => {
          blockReads++;
          return blocks;
        },
      });
      expect(blockReads).toBe(1);
      expect(calls).toEqual({ reads: 1, writes: 1 });
      expect(weight.format).toBe(today);
      expect(Object.keys(weight.tensors).sort()).toEqual(parts);
      expect(kept.get('blk.0.ffn_up.weight')!.format).toBe(today);
      backend.dispose();
    });
  }
});
