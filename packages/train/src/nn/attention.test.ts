import { type Backend, createCpuBackend, type HostArray, type KernelRunner, sizeOf } from '@rayo/core';
import { describe, expect, it } from 'vitest';
import { gradCheck } from '../autograd/gradcheck.js';
import { Tape } from '../autograd/tape.js';
import { Rng } from '../random.js';
import { CausalSelfAttention } from './attention.js';
import { TransformerBlock } from './transformer.js';

/**
 * Checks `layer`'s input gradients against central differences at a random
 * input of `shape` (uniform in [-1, 1) from `seed`), and that every
 * parameter received a gradient too.
 */
async function expectGradientsMatch(
  backend: Backend,
  layer: CausalSelfAttention | TransformerBlock,
  shape: number[],
  seed: number,
): Promise<void> {
  const result = await gradCheck(backend, (tape, x) => layer.forward(tape, x), [
    { shape, data: new Rng(seed).uniformArray(sizeOf(shape), -1, 1) },
  ]);
  expect(result.mismatches).toEqual([]);
  expect(layer.parameters().every((p) => p.grad !== undefined)).toBe(true);
}

/** Rows of x · Wᵀ for W [out, in]. */
function project(x: HostArray, rows: number, w: HostArray, dim: number): Float64Array {
  const y = new Float64Array(rows * dim);
  for (let r = 0; r < rows; r++)
    for (let o = 0; o < dim; o++) {
      let acc = 0;
      for (let i = 0; i < dim; i++) acc += x[r * dim + i]! * w[o * dim + i]!;
      y[r * dim + o] = acc;
    }
  return y;
}

describe('CausalSelfAttention', () => {
  it('matches a plain causal attention for one sequence', async () => {
    const backend = createCpuBackend();
    const [t, dim, heads] = [5, 8, 2];
    const hd = dim / heads;
    const attn = new CausalSelfAttention(backend, { dim, heads, seed: 1 });
    const x = new Rng(2).uniformArray(t * dim, -1, 1);
    using tape = new Tape(backend);
    const y = await attn.forward(tape, tape.input(x, [t, dim])).value.read();

    const [wq, wk, wv, wo] = await Promise.all(
      [attn.q, attn.k, attn.v, attn.o].map((l) => l.weight.value.read()),
    );
    const q = project(x, t, wq!, dim);
    const k = project(x, t, wk!, dim);
    const v = project(x, t, wv!, dim);
    const o = new Float64Array(t * dim);
    for (let h = 0; h < heads; h++) {
      for (let i = 0; i < t; i++) {
        const s: number[] = [];
        for (let j = 0; j <= i; j++) {
          let dot = 0;
          for (let d = 0; d < hd; d++) dot += q[i * dim + h * hd + d]! * k[j * dim + h * hd + d]!;
          s.push(dot / Math.sqrt(hd));
        }
        const max = Math.max(...s);
        const e = s.map((z) => Math.exp(z - max));
        const total = e.reduce((a, b) => a + b, 0);
        for (let j = 0; j <= i; j++)
          for (let d = 0; d < hd; d++) o[i * dim + h * hd + d]! += (e[j]! / total) * v[j * dim + h * hd + d]!;
      }
    }
    const expected = project(Float32Array.from(o), t, wo!, dim);
    for (let i = 0; i < expected.length; i++) expect(y[i]).toBeCloseTo(expected[i]!, 5);
    attn.dispose();
  });

  it('treats each sequence of a batch on its own, RoPE positions included', async () => {
    const backend = createCpuBackend();
    const [t, b, dim] = [4, 3, 8];
    const attn = new CausalSelfAttention(backend, { dim, heads: 2, rope: true, seed: 5 });
    const x = new Rng(6).uniformArray(t * b * dim, -1, 1);
    using tape = new Tape(backend);
    const batched = await attn.forward(tape, tape.input(x, [t, b, dim])).value.read();
    for (let s = 0; s < b; s++) {
      const one = new Float32Array(t * dim);
      for (let i = 0; i < t; i++) one.set(x.subarray((i * b + s) * dim, (i * b + s + 1) * dim), i * dim);
      const y = await attn.forward(tape, tape.input(one, [t, dim])).value.read();
      for (let i = 0; i < t; i++)
        for (let d = 0; d < dim; d++) expect(batched[(i * b + s) * dim + d]).toBeCloseTo(y[i * dim + d]!, 5);
    }
    attn.dispose();
  });

  it('runs through the flash kernels where the backend has them; gradients match central differences', async () => {
    const backend = createCpuBackend();
    const attn = new CausalSelfAttention(backend, { dim: 12, heads: 3, rope: true, seed: 3 });
    expect(attn.flash).toBe(true);
    await expectGradientsMatch(backend, attn, [5, 2, 12], 4);
    attn.dispose();
  });

  it('gives the same output and gradients with the flash kernels as composed from products and softmax', async () => {
    const backend = createCpuBackend();
    const x = new Rng(8).uniformArray(6 * 2 * 8, -1, 1);
    const grads: HostArray[][] = [];
    for (const flash of [true, false]) {
      const attn = new CausalSelfAttention(backend, { dim: 8, heads: 2, rope: true, seed: 7, flash });
      using tape = new Tape(backend);
      const input = tape.variable(tape.upload(x, [6, 2, 8]));
      const y = attn.forward(tape, input);
      // A random seed gradient: every output element's weight differs.
      tape.backward(y, tape.upload(new Rng(9).uniformArray(x.length, -1, 1), [6, 2, 8]));
      grads.push(
        await Promise.all(
          [y.value, input.grad!, ...attn.parameters().map((p) => p.grad!)].map((t) => t.read()),
        ),
      );
      attn.dispose();
    }
    grads[0]!.forEach((g, i) => {
      g.forEach((value, e) => {
        expect(value).toBeCloseTo(grads[1]![i]![e]!, 5);
      });
    });
  });

  it("attends with the flash kernels' precision 'half' under 'bf16', and 'f32' under the other policies", () => {
    const backend = createCpuBackend();
    for (const [policy, precision] of [
      ['bf16', 'half'],
      ['f32', 'f32'],
      ['tf32', 'f32'],
    ] as const) {
      const attn = new CausalSelfAttention(backend, { dim: 8, heads: 2, seed: 7 }).setPrecision(policy);
      const seen: [string, unknown][] = [];
      // A runner that notes the flash kernels' attributes on the way to the backend.
      const runner: KernelRunner = {
        run: (spec, inputs, attrs, options) => {
          if (spec.family === 'flashAttention') seen.push([spec.name, attrs?.precision]);
          return backend.run(spec, inputs, attrs, options);
        },
      };
      using tape = new Tape(backend, { runner });
      const input = tape.variable(tape.upload(new Rng(8).uniformArray(5 * 2 * 8, -1, 1), [5, 2, 8]));
      tape.backward(attn.forward(tape, input), tape.upload(new Rng(9).uniformArray(80, -1, 1), [5, 2, 8]));
      expect(seen).toEqual([
        ['flashAttention', precision],
        ['flashAttentionBackward', precision],
      ]);
      attn.dispose();
    }
  });

  it('keeps no [T, T] score matrix on the flash path, forward and backward', async () => {
    const [t, dim] = [256, 4];
    const peaks: number[] = [];
    for (const flash of [true, false]) {
      const backend = createCpuBackend();
      const attn = new CausalSelfAttention(backend, { dim, heads: 2, seed: 2, flash });
      backend.resetPeakMemory();
      const before = backend.memory().liveBytes;
      {
        using tape = new Tape(backend);
        const x = tape.variable(tape.upload(new Rng(3).uniformArray(t * dim, -1, 1), [t, dim]));
        const y = tape.scope(() => attn.forward(tape, x));
        tape.backward(y, tape.upload(new Rng(4).uniformArray(t * dim, -1, 1), [t, dim]));
      }
      peaks.push(backend.memory().peakBytes - before);
      attn.dispose();
    }
    // One head's scores alone are t · t f32; the composed path holds several such matrices at once.
    const scores = 4 * t * t;
    expect(peaks[0]).toBeLessThan(scores / 4);
    expect(peaks[1]).toBeGreaterThan(scores);
  });

  it('refuses heads that do not divide the dimension', () => {
    expect(() => new CausalSelfAttention(createCpuBackend(), { dim: 6, heads: 4 })).toThrow(/divide/);
  });
});

describe('TransformerBlock', () => {
  for (const mlp of ['swiglu', 'gelu'] as const) {
    it(`${mlp}: gradients of the input match central differences`, async () => {
      const backend = createCpuBackend();
      const block = new TransformerBlock(backend, { dim: 8, heads: 2, mlp, rope: true, seed: 9 });
      await expectGradientsMatch(backend, block, [3, 2, 8], 10);
      block.dispose();
    });
  }

  it('names its parameters', () => {
    const block = new TransformerBlock(createCpuBackend(), { dim: 8, heads: 2 });
    expect(block.namedParameters().map(([n]) => n)).toEqual([
      'norm1.weight',
      'attn.q.weight',
      'attn.k.weight',
      'attn.v.weight',
      'attn.o.weight',
      'norm2.weight',
      'gate.weight',
      'up.weight',
      'down.weight',
    ]);
  });
});
