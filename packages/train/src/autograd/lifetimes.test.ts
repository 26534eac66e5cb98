import { createCpuBackend, RayoError, type Tensor } from '@rayo/core';
import { describe, expect, it } from 'vitest';
import { Parameter } from '../nn/module.js';
import { Rng } from '../random.js';
import { exp, scale, sum } from './ops/index.js';
import { Tape } from './tape.js';

const read = async (t: { read(): Promise<ArrayLike<number>> }) => Array.from(await t.read());

/** A parameter of `n` random values in (−1, 1). */
function randomParameter(backend: ReturnType<typeof createCpuBackend>, n: number, seed: number): Parameter {
  const rng = new Rng(seed);
  return new Parameter(backend.upload(rng.uniformArray(n, -1, 1), [n]), 'w');
}

describe('Tape memory reuse', () => {
  it('gives what a scope made and no backward rule reads to later kernels', async () => {
    const backend = createCpuBackend();
    const w = randomParameter(backend, 37, 1);
    using tape = new Tape(backend);
    // scale's backward reads nothing: both intermediates are dead after the scope.
    const y = tape.scope(() => scale(tape, scale(tape, scale(tape, w, 2), 3), 5));
    const live = backend.memory().liveTensors;
    const z = scale(tape, scale(tape, y, 0.5), 4);
    expect(backend.memory().liveTensors).toBe(live);
    tape.backward(sum(tape, z));
    expect(await read(w.grad!)).toEqual(new Array(37).fill(60));
    w.zeroGrad();
  });

  it('keeps what a backward rule reads until that rule has run', async () => {
    const backend = createCpuBackend();
    const w = randomParameter(backend, 29, 2);
    const host = await read(w.value);
    using tape = new Tape(backend);
    // The scale's output is dead after the scope; the inner exp's is read by its rule.
    const y = tape.scope(() => exp(tape, exp(tape, scale(tape, w, 0.5))));
    const z = scale(tape, y, 1.5);
    tape.backward(sum(tape, z));
    const grad = await read(w.grad!);
    host.forEach((x, i) => {
      const inner = Math.exp(0.5 * x);
      const expected = 1.5 * Math.exp(inner) * inner * 0.5;
      expect(Math.abs(grad[i]! - expected)).toBeLessThanOrEqual(1e-5 * Math.abs(expected));
    });
    w.zeroGrad();
  });

  it('refuses a second backward once a scope let the first free what rules read', () => {
    const backend = createCpuBackend();
    const w = randomParameter(backend, 5, 3);
    using tape = new Tape(backend);
    const loss = sum(
      tape,
      tape.scope(() => exp(tape, exp(tape, w))),
    );
    tape.backward(loss);
    expect(() => tape.backward(loss)).toThrow(RayoError);
    w.zeroGrad();
  });

  it('with reuseMemory false, frees nothing before dispose', async () => {
    const backend = createCpuBackend();
    const w = randomParameter(backend, 11, 4);
    const tape = new Tape(backend, { reuseMemory: false });
    let inner: Tensor | undefined;
    const y = tape.scope(() => {
      const s = scale(tape, w, 2);
      inner = s.value;
      return exp(tape, s);
    });
    const live = backend.memory().liveTensors;
    scale(tape, y, 3);
    expect(backend.memory().liveTensors).toBe(live + 1);
    const loss = sum(tape, y);
    tape.backward(loss);
    tape.backward(loss);
    // The scope's intermediate still holds 2w.
    expect(await read(inner!)).toEqual((await read(w.value)).map((x) => 2 * x));
    tape.dispose();
    w.zeroGrad();
  });
});
