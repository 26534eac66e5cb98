import { bytesPerElement } from '../dtype.js';
import { defineKernel } from '../kernel.js';
import { formatShape, shapesEqual, sizeOf } from '../shape.js';
import { ArgCheck } from './check.js';
import { FLOAT, type NoAttrs } from './vocabulary.js';

const FAMILY = 'embedding';
const I32 = ['i32'] as const;

// Ids live on the device, so the host cannot check them. An id outside the
// table is never clamped (that would train or read the wrong row silently):
// it poisons the result with NaN so that it shows.

export const embedding = defineKernel<NoAttrs>({
  name: 'embedding',
  family: FAMILY,
  summary: 'y[..., :] = table[ids[...], :]; an id outside [0, V) gives a NaN row',
  inputs: [
    { name: 'table', dtypes: FLOAT, doc: '[V, D]' },
    { name: 'ids', dtypes: I32, doc: 'any shape of rank >= 1, row ids in [0, V)' },
  ],
  attributes: {},
  infer([table, ids]) {
    const check = new ArgCheck('embedding');
    check.rank('table', table!, 2, '[V, D]');
    check.minRank('ids', ids!, 1);
    return [{ name: 'y', shape: [...ids!.shape, table!.shape[1]!], dtype: table!.dtype }];
  },
  reference([table, ids], _attrs, io) {
    const [v, d] = io.inputs[0]!.shape as [number, number];
    const y = new Float32Array(ids!.length * d);
    for (let i = 0; i < ids!.length; i++) {
      const id = ids![i]!;
      if (id >= 0 && id < v) y.set(table!.subarray(id * d, id * d + d), i * d);
      else y.fill(Number.NaN, i * d, i * d + d);
    }
    return [y];
  },
  cost([table, ids]) {
    const n = sizeOf(ids!.shape);
    const d = table!.shape[1]!;
    // A gather: read the ids and one table row per id, write the rows.
    return { flops: 0, bytes: bytesPerElement('i32') * n + 2 * bytesPerElement(table!.dtype) * n * d };
  },
});

type EmbeddingBackwardAttrs = { vocabSize: number };

export const embeddingBackward = defineKernel<EmbeddingBackwardAttrs>({
  name: 'embeddingBackward',
  family: FAMILY,
  summary:
    'dtable[v, :] = Σ dy[i, :] over the positions i with ids[i] = v (rows never referenced are 0); any id outside [0, vocabSize) makes all of dtable NaN',
  inputs: [
    { name: 'dy', dtypes: FLOAT, doc: '[...ids.shape, D]' },
    { name: 'ids', dtypes: I32, doc: 'any shape of rank >= 1, row ids in [0, vocabSize)' },
  ],
  attributes: {
    vocabSize: { kind: 'number', integer: true, min: 1, doc: 'V, the rows of the table' },
  },
  infer([dy, ids], { vocabSize }) {
    const check = new ArgCheck('embeddingBackward');
    check.minRank('ids', ids!, 1);
    const lead = dy!.shape.slice(0, -1);
    check.shape(
      dy!.shape.length === ids!.shape.length + 1 && shapesEqual(lead, ids!.shape),
      'dy',
      'dy must be [...ids.shape, D]',
      `[${[...ids!.shape, 'D'].join(', ')}]`,
      formatShape(dy!.shape),
    );
    return [{ name: 'dtable', shape: [vocabSize, dy!.shape[dy!.shape.length - 1]!], dtype: dy!.dtype }];
  },
  reference([dy, ids], { vocabSize }, io) {
    const d = io.outputs[0]!.shape[1]!;
    // An out-of-range id has no row to poison; its gradient would be lost, so
    // the whole table is poisoned instead.
    for (let i = 0; i < ids!.length; i++) {
      const id = ids![i]!;
      if (!(id >= 0 && id < vocabSize)) return [new Float32Array(vocabSize * d).fill(Number.NaN)];
    }
    const acc = new Float64Array(vocabSize * d);
    for (let i = 0; i < ids!.length; i++) {
      const row = ids![i]! * d;
      for (let j = 0; j < d; j++) acc[row + j]! += dy![i * d + j]!;
    }
    return [Float32Array.from(acc)];
  },
  cost([dy, ids], { vocabSize }) {
    const n = sizeOf(ids!.shape);
    const d = dy!.shape[dy!.shape.length - 1]!;
    // A scatter-add: read dy and the ids, write the table once.
    return {
      flops: n * d,
      bytes: bytesPerElement('i32') * n + bytesPerElement(dy!.dtype) * (n * d + vocabSize * d),
    };
  },
});
