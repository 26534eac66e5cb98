import { createCpuBackend } from '@rayo/core';
import { describe, expect, it } from 'vitest';
import { Tape } from '../autograd/tape.js';
import { Rng } from '../random.js';
import { Linear } from './linear.js';
import { MLP } from './mlp.js';

describe('Linear', () => {
  it('computes x · Wᵀ + b for inputs of any rank', async () => {
    const backend = createCpuBackend();
    const layer = new Linear(backend, 3, 2, { seed: 4 });
    const w = await layer.weight.value.read();
    const b = await layer.bias!.value.read();
    const x = new Rng(1).uniformArray(2 * 2 * 3, -1, 1);
    using tape = new Tape(backend);
    const y = await layer.forward(tape, tape.input(x, [2, 2, 3])).value.read();
    expect(layer.weight.shape).toEqual([2, 3]);
    for (let r = 0; r < 4; r++) {
      for (let o = 0; o < 2; o++) {
        let expected = b[o]!;
        for (let i = 0; i < 3; i++) expected += x[r * 3 + i]! * w[o * 3 + i]!;
        expect(y[r * 2 + o]).toBeCloseTo(expected, 5);
      }
    }
    layer.dispose();
  });

  it('initialises uniformly in ±1/√in, the same for the same seed', async () => {
    const backend = createCpuBackend();
    const a = new Linear(backend, 64, 8, { seed: 3 });
    const b = new Linear(backend, 64, 8, { seed: 3 });
    const c = new Linear(backend, 64, 8, { seed: 4 });
    const wa = Array.from(await a.weight.value.read());
    expect(wa).toEqual(Array.from(await b.weight.value.read()));
    expect(wa).not.toEqual(Array.from(await c.weight.value.read()));
    expect(Math.max(...wa.map(Math.abs))).toBeLessThanOrEqual(1 / 8);
    expect(Math.max(...wa.map(Math.abs))).toBeGreaterThan(0.9 / 8);
  });
});

describe('MLP', () => {
  it('names its parameters by path and counts them', () => {
    const backend = createCpuBackend();
    const mlp = new MLP(backend, [4, 5, 3]);
    expect(mlp.namedParameters().map(([n, p]) => [n, p.shape])).toEqual([
      ['0.weight', [5, 4]],
      ['0.bias', [5]],
      ['1.weight', [3, 5]],
      ['1.bias', [3]],
    ]);
    expect(mlp.parameterCount()).toBe(4 * 5 + 5 + 5 * 3 + 3);
    const live = backend.memory().liveTensors;
    mlp.dispose();
    expect(backend.memory().liveTensors).toBe(live - 4);
  });

  it('refuses fewer than two sizes', () => {
    expect(() => new MLP(createCpuBackend(), [4])).toThrow(/at least an input and an output size/);
  });
});
