import {
  createCpuBackend,
  type DeviceStorage,
  InvalidArgumentError,
  ShapeError,
  type Tensor,
} from '@rayo/core';
import { describe, expect, it } from 'vitest';
import { Parameter } from '../nn/module.js';
import { clipGradNorm } from '../optim/clip.js';
import { add, matmul, mul, reshape, sum } from './ops/index.js';
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

  it('writes a leaf’s gradient into its gradientHome, accumulating there, and frees its own copy', async () => {
    const backend = createCpuBackend();
    const flat = backend.upload([-9, -9, -9, -9, -9, -9], [6]);
    const w = new Parameter(backend.upload([1, 2, 3, 4], [2, 2]), 'w');
    w.gradientHome = () => flat.slice(1, 4).reshape([2, 2]);
    const live = backend.memory().liveTensors;
    for (let i = 0; i < 2; i++) {
      using tape = new Tape(backend);
      const x = tape.input([1, 0, 0, 1], [2, 2]);
      tape.backward(sum(tape, mul(tape, matmul(tape, x, w), matmul(tape, x, w))));
      expect(w.grad!.base).toBe(flat);
    }
    // 2w twice, in flat's elements 1–4; the ends untouched, no gradient memory left behind.
    expect(await read(flat)).toEqual([-9, 4, 8, 12, 16, -9]);
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

  it('reports each leaf once, as soon as backward made its last contribution to it', () => {
    const backend = createCpuBackend();
    const param = (name: string, v: number) => new Parameter(backend.upload([v, v + 1], [2]), name);
    const [tied, w, twice, unused] = [param('tied', 1), param('w', 2), param('twice', 3), param('unused', 4)];
    using tape = new Tape(backend);
    const x = tape.input([0.5, -1], [2]);
    const host = (t: Tensor) => Array.from(t.storage<DeviceStorage<Float32Array>>().buffer);
    // Forward uses: tied (node 0), twice (nodes 1 and 2), w (node 3), tied again (node 4), then a sum (5).
    const a = mul(tape, x, tied);
    const b = mul(tape, mul(tape, a, twice), twice);
    const c = add(tape, b, w);
    const loss = sum(tape, mul(tape, c, tied));
    const events: { names: string[]; kernels: number; grads: number[][] }[] = [];
    let kernels = 0;
    const counting = {
      run: ((...args: Parameters<typeof backend.run>) => {
        kernels++;
        return backend.run(...args);
      }) as typeof backend.run,
    };
    tape.switchRunner(counting);
    tape.backward(loss, {
      onGradientsFinal: (leaves) => {
        events.push({
          names: leaves.map((l) => l.name!),
          kernels,
          grads: leaves.map((l) => host(l.grad!)),
        });
      },
    });
    // Backward runs the nodes from the last: w is final after node 3, twice after node 1, tied
    // (used by nodes 4 and 0) only after node 0, at the very end; unused never gets a gradient.
    expect(events.map((e) => e.names)).toEqual([['w'], ['twice'], ['tied']]);
    expect(events[0]!.kernels).toBeLessThan(events[1]!.kernels);
    expect(events[1]!.kernels).toBeLessThan(events[2]!.kernels);
    expect(kernels).toBe(events[2]!.kernels);
    // What a callback sees is the final gradient.
    for (const e of events)
      expect(e.grads).toEqual([host([w, twice, tied].find((p) => p.name === e.names[0])!.grad!)]);
    expect(unused.grad).toBeUndefined();
    for (const p of [tied, w, twice]) p.zeroGrad();
  });

  it('switches the runner mid-backward: kernels after the switch go to the new batch', async () => {
    const backend = createCpuBackend();
    const w1 = new Parameter(backend.upload([2], [1]), 'w1');
    const w2 = new Parameter(backend.upload([3], [1]), 'w2');
    const first = backend.batch();
    const batches = [first];
    using tape = new Tape(backend, { runner: first });
    const y = sum(tape, mul(tape, mul(tape, tape.input([5], [1]), w1), w2));
    tape.backward(y, {
      onGradientsFinal: () => {
        const next = backend.batch();
        batches.push(next);
        tape.switchRunner(next);
      },
    });
    expect(tape.runner).toBe(batches[2]);
    expect(batches.map((b) => b.size > 0)).toEqual([true, true, false]);
    for (const b of batches) await b.submit();
    expect(await read(w1.grad!)).toEqual([15]);
    expect(await read(w2.grad!)).toEqual([10]);
    w1.zeroGrad();
    w2.zeroGrad();
  });

  it('gives the same gradients with and without the callback', async () => {
    const run = async (hook: boolean) => {
      const backend = createCpuBackend();
      const w = new Parameter(backend.upload([1, -2, 3, 0.5], [2, 2]), 'w');
      const v = new Parameter(backend.upload([0.25, 4], [2]), 'v');
      using tape = new Tape(backend);
      const x = tape.input([1, 2, -1, 0.5], [2, 2]);
      const h = mul(tape, matmul(tape, x, w), matmul(tape, x, w));
      tape.backward(
        mul(tape, sum(tape, h), sum(tape, mul(tape, v, v))),
        hook ? { onGradientsFinal: () => {} } : undefined,
      );
      return [await read(w.grad!), await read(v.grad!)];
    };
    expect(await run(true)).toEqual(await run(false));
  });
});
