import { createCpuBackend, type Tensor } from '@rayo/core';
import { describe, expect, it } from 'vitest';
import { ACTIVATIONS } from '../autograd/ops/activation.js';
import { biasAdd } from '../autograd/ops/elementwise.js';
import { matmul } from '../autograd/ops/linalg.js';
import { sumSquares } from '../autograd/ops/reduction.js';
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

  it('gives the output and gradients of matmul, biasAdd and the activation run one by one', async () => {
    const backend = createCpuBackend();
    const rng = new Rng(9);
    const x = rng.uniformArray(5 * 6, -1, 1);
    for (const activation of ['relu', 'gelu', 'silu', 'sigmoid', 'tanh'] as const) {
      const mlp = new MLP(backend, [6, 7, 3], { activation, seed: 2 });
      const run = async (fused: boolean) => {
        using tape = new Tape(backend);
        let h = tape.input(x, [5, 6]);
        mlp.layers.forEach((layer, i) => {
          const last = i === mlp.layers.length - 1;
          if (fused) {
            h = layer.forward(tape, h, last ? 'none' : activation);
            return;
          }
          h = biasAdd(tape, matmul(tape, h, layer.weight, { transB: true }), layer.bias!);
          if (!last) h = ACTIVATIONS[activation](tape, h);
        });
        tape.backward(sumSquares(tape, h));
        const grads = await Promise.all(mlp.parameters().map((p) => (p.grad as Tensor).read()));
        mlp.zeroGrad();
        return { y: await h.value.read(), grads };
      };
      const fused = await run(true);
      const plain = await run(false);
      const close = (a: ArrayLike<number>, b: ArrayLike<number>) => {
        for (let i = 0; i < a.length; i++) expect(a[i]).toBeCloseTo(b[i]!, 5);
      };
      close(fused.y, plain.y);
      fused.grads.forEach((g, p) => {
        close(g, plain.grads[p]!);
      });
      mlp.dispose();
    }
  });

  it('refuses fewer than two sizes', () => {
    expect(() => new MLP(createCpuBackend(), [4])).toThrow(/at least an input and an output size/);
  });
});
