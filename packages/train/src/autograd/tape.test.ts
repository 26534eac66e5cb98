import { createCpuBackend, InvalidArgumentError, ShapeError } from '@rayo/core';
import { describe, expect, it } from 'vitest';
import { Parameter } from '../nn/module.js';
import { clipGradNorm } from '../optim/clip.js';
import { add, matmul, mul, reshape, sum } from './index.js';
import { Tape } from './tape.js';

const read = async (t: { read(): Promise<ArrayLike<number>> }) => Array.from(await t.read());

describe('Tape', () => {
  it('computes gradients of parameters and frees everything it owns', async () => {
    const backend = createCpuBackend();
    const w = new Parameter(backend.upload([1, 2, 3, 4], [2, 2]), 'w');
    const live = backend.memory().liveTensors;
    const tape = new Tape(backend);
    const x = tape.input([1, 0, 0, 1], [2, 2]);
    const y = sum(tape, mul(tape, matmul(tape, x, w), matmul(tape, x, w)));
    expect(Array.from(await y.value.read())).toEqual([30]);
    tape.backward(y);
    // d/dw Σ (xw)² = 2 xᵀ x w = 2w for x = I.
    expect(await read(w.grad!)).toEqual([2, 4, 6, 8]);
    tape.dispose();
    expect(backend.memory().liveTensors).toBe(live + 1);
    w.zeroGrad();
    expect(backend.memory().liveTensors).toBe(live);
  });

  it('accumulates into a leaf across backward calls until zeroGrad', async () => {
    const backend = createCpuBackend();
    const w = new Parameter(backend.upload([1, 2], [2]), 'w');
    for (let i = 0; i < 2; i++) {
      using tape = new Tape(backend);
      tape.backward(sum(tape, mul(tape, w, tape.input([3, 4], [2]))));
    }
    expect(await read(w.grad!)).toEqual([6, 8]);
    w.zeroGrad();
    expect(w.grad).toBeUndefined();
  });

  it('gives two leaves that share one gradient their own tensors', async () => {
    const backend = createCpuBackend();
    const a = new Parameter(backend.upload([3, 0], [2]), 'a');
    const b = new Parameter(backend.upload([0, 4], [2]), 'b');
    using tape = new Tape(backend);
    tape.backward(sum(tape, add(tape, a, b)));
    expect(a.grad).not.toBe(b.grad);
    // In-place clipping must scale each gradient once (to 1/2, not 1/4).
    const norm = clipGradNorm([a, b], 1, { eps: 0 });
    expect((await norm.read())[0]).toBeCloseTo(2, 6);
    expect(await read(a.grad!)).toEqual([0.5, 0.5]);
    expect(await read(b.grad!)).toEqual([0.5, 0.5]);
    norm.dispose();
  });

  it('gives a leaf reached through a reshape a gradient of its own shape', async () => {
    const backend = createCpuBackend();
    const w = new Parameter(backend.upload([1, 2, 3, 4, 5, 6], [6]), 'w');
    const tape = new Tape(backend);
    tape.backward(sum(tape, reshape(tape, w, [2, 3])));
    tape.dispose();
    expect(w.grad!.shape).toEqual([6]);
    expect(await read(w.grad!)).toEqual([1, 1, 1, 1, 1, 1]);
  });

  it('records into a command batch and runs on submit', async () => {
    const backend = createCpuBackend();
    const w = new Parameter(backend.upload([2], [1]), 'w');
    const batch = backend.batch();
    using tape = new Tape(backend, { runner: batch });
    const y = sum(tape, mul(tape, w, w));
    tape.backward(y);
    expect(batch.size).toBeGreaterThan(2);
    await batch.submit();
    expect(await read(y.value)).toEqual([4]);
    expect(await read(w.grad!)).toEqual([4]);
  });

  it('says what is wrong with a backward call', () => {
    const backend = createCpuBackend();
    using tape = new Tape(backend);
    const c = tape.input([1, 2], [2]);
    expect(() => tape.backward(c)).toThrow(InvalidArgumentError);
    const v = tape.variable(tape.upload([1, 2], [2]));
    const y = mul(tape, v, v);
    expect(() => tape.backward(y)).toThrow(/needs a seed gradient/);
    expect(() => tape.backward(y, tape.zeros([3]))).toThrow(ShapeError);
    using other = new Tape(backend);
    expect(() => other.backward(y, other.zeros([2]))).toThrow(/another tape/);
  });

  it('keeps no backward rules without gradients', () => {
    const backend = createCpuBackend();
    const w = new Parameter(backend.upload([1], [1]), 'w');
    using tape = new Tape(backend, { grad: false });
    const y = mul(tape, w, w);
    expect(y.requiresGrad).toBe(false);
    expect(y.isLeaf).toBe(true);
  });

  it('keep() hands a value over to the caller', async () => {
    const backend = createCpuBackend();
    const tape = new Tape(backend);
    const y = mul(tape, tape.input([2], [1]), tape.input([3], [1]));
    const kept = tape.keep(y);
    const viewKept = tape.keep(reshape(tape, y, []));
    tape.dispose();
    expect(await read(kept)).toEqual([6]);
    expect(await read(viewKept)).toEqual([6]);
    kept.dispose();
    viewKept.dispose();
  });
});
