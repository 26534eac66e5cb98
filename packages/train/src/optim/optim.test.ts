import {
  type AttrValues,
  createCpuBackend,
  InvalidArgumentError,
  type KernelRunner,
  type KernelSpec,
  type Tensor,
} from '@rayo/core';
import { describe, expect, it } from 'vitest';
import { Parameter } from '../nn/module.js';
import { AdamW } from './adamw.js';
import { clipGradNorm, gradNorm } from './clip.js';
import { constantLr, warmupCosine } from './schedule.js';
import { SGD } from './sgd.js';

const backend = createCpuBackend();

function param(values: number[], name: string, grad: number[]): Parameter {
  const p = new Parameter(backend.upload(values, [values.length]), name);
  p.grad = backend.upload(grad, [grad.length]);
  return p;
}

describe('AdamW', () => {
  it('follows bias-corrected Adam with decoupled weight decay, skipping undecayed parameters', async () => {
    const w = param([1, -2], 'w', [0.5, -1]);
    const b = param([3], 'b', [2]);
    const opt = new AdamW(
      [
        ['w', w],
        ['b', b],
      ],
      { lr: 0.1, weightDecay: 0.5, noDecay: (name) => name === 'b' },
    );
    const host = { w: [1, -2], b: [3], m: { w: [0, 0], b: [0] }, v: { w: [0, 0], b: [0] } };
    const grads = { w: [0.5, -1], b: [2] };
    for (let t = 1; t <= 2; t++) {
      opt.step();
      for (const k of ['w', 'b'] as const) {
        const decay = k === 'w' ? 0.5 : 0;
        host[k] = host[k].map((p, i) => {
          const g = grads[k][i]!;
          host.m[k][i] = 0.9 * host.m[k][i]! + 0.1 * g;
          host.v[k][i] = 0.999 * host.v[k][i]! + 0.001 * g * g;
          const mHat = host.m[k][i]! / (1 - 0.9 ** t);
          const vHat = host.v[k][i]! / (1 - 0.999 ** t);
          return p * (1 - 0.1 * decay) - (0.1 * mHat) / (Math.sqrt(vHat) + 1e-8);
        });
      }
    }
    expect(opt.stepCount).toBe(2);
    const got = { w: Array.from(await w.value.read()), b: Array.from(await b.value.read()) };
    for (const k of ['w', 'b'] as const) {
      for (let i = 0; i < got[k].length; i++) expect(got[k][i]).toBeCloseTo(host[k][i]!, 5);
    }
    expect(opt.stateTensors().map(([n]) => n)).toEqual(['w.m', 'w.v', 'b.m', 'b.v']);
    opt.dispose();
  });

  it('leaves parameters without a gradient alone', async () => {
    const p = new Parameter(backend.upload([1, 2], [2]), 'p');
    const opt = new AdamW([p], { lr: 1 });
    opt.step();
    expect(Array.from(await p.value.read())).toEqual([1, 2]);
    opt.dispose();
  });

  it('updates every parameter in one kernel call, and clips inside it as clipGradNorm would', async () => {
    const make = () => [param([1, -2, 0.5], 'w', [3, -4, 1]), param([3], 'b', [2]), param([7], 'none', [1])];
    const [a, b] = [make(), make()];
    a[2]!.grad = undefined;
    b[2]!.grad = undefined;
    const optA = new AdamW(a, { lr: 0.1, noDecay: (_, p) => p.shape[0] === 1 });
    const optB = new AdamW(b, { lr: 0.1, noDecay: (_, p) => p.shape[0] === 1 });
    clipGradNorm(a, 2).dispose();
    optA.step();
    const calls: string[] = [];
    const runner: KernelRunner = {
      run<A extends AttrValues>(
        spec: KernelSpec<A>,
        inputs: readonly (Tensor | undefined)[],
        attrs?: Partial<A>,
      ) {
        calls.push(spec.name);
        return backend.run(spec, inputs, attrs);
      },
    };
    using norm = gradNorm(b, { runner });
    optB.step(runner, { norm, maxNorm: 2 });
    expect(calls).toEqual(['globalNorm', 'multiTensorAdamw']);
    expect((await norm.read())[0]).toBeCloseTo(Math.sqrt(9 + 16 + 1 + 4), 5);
    // The gradients are left unclipped; the parameters move as after clipping.
    expect(Array.from(await b[0]!.grad!.read())).toEqual([3, -4, 1]);
    for (let i = 0; i < 2; i++) {
      const [x, y] = [await a[i]!.value.read(), await b[i]!.value.read()];
      x.forEach((v, j) => {
        expect(y[j]).toBeCloseTo(v, 6);
      });
    }
    expect(Array.from(await b[2]!.value.read())).toEqual([7]);
    optA.dispose();
    optB.dispose();
  });

  it('refuses an empty parameter list and a negative learning rate', () => {
    expect(() => new AdamW([])).toThrow(InvalidArgumentError);
    expect(() => new AdamW([param([1], 'p', [1])], { lr: -1 })).toThrow(/learning rate/);
  });
});

describe('SGD', () => {
  it('applies momentum like PyTorch', async () => {
    const p = param([1], 'p', [0.5]);
    const opt = new SGD([p], { lr: 0.1, momentum: 0.9 });
    opt.step();
    opt.step();
    // buf = 0.5, then 0.9 · 0.5 + 0.5 = 0.95; p = 1 − 0.05 − 0.095.
    expect((await p.value.read())[0]).toBeCloseTo(0.855, 6);
    opt.dispose();
  });
});

describe('clipGradNorm', () => {
  it('scales gradients to the norm on the device and returns the norm before clipping', async () => {
    const a = param([0, 0], 'a', [3, 0]);
    const b = param([0], 'b', [4]);
    const norm = clipGradNorm([a, b], 1, { eps: 0 });
    expect((await norm.read())[0]).toBeCloseTo(5, 6);
    expect(Array.from(await a.grad!.read())).toEqual([Math.fround(0.6), 0]);
    expect((await b.grad!.read())[0]).toBeCloseTo(0.8, 6);
    norm.dispose();
  });

  it('needs gradients', () => {
    expect(() => clipGradNorm([new Parameter(backend.zeros([1]))], 1)).toThrow(/no parameter has a gradient/);
  });
});

describe('schedules', () => {
  it('warms up linearly, then decays along a cosine to the floor', () => {
    const lr = warmupCosine({ lr: 1, warmupSteps: 4, totalSteps: 14, minLr: 0.1 });
    expect([0, 1, 2, 3].map(lr)).toEqual([0.25, 0.5, 0.75, 1]);
    expect(lr(4)).toBeCloseTo(1, 12);
    expect(lr(9)).toBeCloseTo(0.55, 12);
    expect(lr(14)).toBeCloseTo(0.1, 12);
    expect(lr(100)).toBeCloseTo(0.1, 12);
    expect(constantLr(0.3)(7)).toBe(0.3);
    expect(() => warmupCosine({ lr: 1, warmupSteps: 5, totalSteps: 3 })).toThrow(/warm-up/);
  });
});
