import {
  type Backend,
  createCpuBackend,
  type DType,
  embedding,
  type HostArray,
  linear,
  matmul,
  type Tensor,
  UnsupportedOnBackendError,
} from '@rayo/core';
import { compareOutputs, Rng } from '@rayo/core/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { WgpuBackend } from '../backend.js';
import { backendProvider } from '../index.js';
import { BindingProbe } from './bindingProbe.testkit.js';

const unavailable = await backendProvider.probe();
const needsAdapter = unavailable && process.env.CI !== 'true' ? describe.skip : describe;

/** The forced binding limit: every table and weight below takes 2–5 pieces of whole rows. */
const LIMIT = 16 * 1024;

// A dense model's embedding table and head (b stored [N, K]) larger than one binding: the gather and
// the product bind them in pieces of whole rows; compared against the cpu backend, outputs poisoned.
needsAdapter('dense tables and weights larger than one storage binding', () => {
  let gpu: WgpuBackend;
  const cpu = createCpuBackend();
  /** Dispatches by shader key since the last reset, and the largest storage range bound. */
  let probe: BindingProbe;
  beforeAll(async () => {
    probe = await BindingProbe.create(LIMIT);
    gpu = probe.gpu;
  }, 120_000);
  afterAll(() => {
    gpu.dispose();
    cpu.dispose();
  });

  const random = (rng: Rng, n: number) => Array.from({ length: n }, () => rng.uniform(-1, 1));

  /** Runs `f` on both backends and compares; returns the gpu's dispatched shader keys. */
  async function compare(
    label: string,
    f: (b: Backend) => Tensor,
    dtype: DType,
    tol: { rtol: number; atol: number },
  ): Promise<string[]> {
    probe.reset();
    const got = f(gpu);
    const keys = [...probe.dispatched];
    expect(probe.largestBinding, `${label}: a binding over the limit`).toBeLessThanOrEqual(LIMIT);
    const mismatch = compareOutputs(
      dtype,
      (await got.read()) as HostArray,
      (await f(cpu).read()) as HostArray,
      tol,
    );
    expect(mismatch, label).toBeUndefined();
    return keys;
  }

  // [V, D] of f32, f16 and bf16 tables: rows of vec4 / 8 halves and odd rows (u32 words of two halves).
  const tables: [DType, number, number][] = [
    ['f32', 257, 48],
    ['f32', 203, 37],
    ['f16', 403, 32],
    ['bf16', 291, 45],
  ];
  for (const [dtype, vocab, dim] of tables) {
    it(`embedding of a ${dtype} [${vocab}, ${dim}] table matches the cpu backend, ids in every piece and outside`, async () => {
      const rng = new Rng(vocab * 7 + dim);
      const table = random(rng, vocab * dim);
      const ids = [0, vocab - 1, -3, vocab, ...Array.from({ length: 23 }, () => rng.int(0, vocab))];
      const keys = await compare(
        `${dtype} embedding`,
        (b) => {
          const t = b.upload(table, [vocab, dim], dtype);
          expect(t.byteLength).toBeGreaterThan(LIMIT);
          const out = b.upload(new Array(ids.length * dim).fill(Number.NaN), [ids.length, dim], dtype);
          return b.run(embedding, [t, b.upload(ids, [ids.length], 'i32')], {}, { out: [out] })[0]!;
        },
        dtype,
        { rtol: 0, atol: 0 },
      );
      const pieces = keys.filter((k) => k.startsWith('embedding/embedding/')).length;
      expect(pieces).toBeGreaterThanOrEqual(2);
      expect(pieces).toBeLessThanOrEqual(5);
    }, 300_000);
  }

  // b [N, K] stored as a head is: one row of a (columns of y in place), and more rows (through scratch).
  const products: [DType, number, number, number, boolean][] = [
    ['f32', 1, 64, 199, false],
    ['bf16', 1, 96, 301, false],
    ['f16', 1, 64, 403, false],
    ['f32', 3, 40, 331, true],
    ['bf16', 5, 64, 258, true],
  ];
  for (const [dtype, m, k, n, withC] of products) {
    it(`matmul ${m}×${k} · (${dtype} [${n}, ${k}])ᵀ${withC ? ' + c' : ''} matches the cpu backend`, async () => {
      const rng = new Rng(m * 1000 + k + n);
      const a = random(rng, m * k);
      const w = random(rng, n * k);
      const c = random(rng, m * n);
      const keys = await compare(
        `${dtype} head ${m}×${k}→${n}`,
        (b) => {
          const wt = b.upload(w, [n, k], dtype);
          expect(wt.byteLength).toBeGreaterThan(LIMIT);
          const out = b.upload(new Array(m * n).fill(Number.NaN), [m, n]);
          return b.run(
            matmul,
            [b.upload(a, [m, k]), wt, withC ? b.upload(c, [m, n]) : undefined],
            { transB: true, ...(withC ? { beta: -0.5 } : {}) },
            { out: [out] },
          )[0]!;
        },
        'f32',
        { rtol: 1e-4, atol: 2e-5 * Math.sqrt(k) },
      );
      expect(keys.length).toBeGreaterThanOrEqual(2);
    }, 300_000);
  }

  it('linear with a bias, an activation and its pre-activation splits the weight and every column', async () => {
    const [m, k, n] = [2, 64, 197];
    const rng = new Rng(0x11e);
    const [x, w, bias] = [random(rng, m * k), random(rng, n * k), random(rng, n)];
    for (const output of [0, 1]) {
      await compare(
        `linear output ${output}`,
        (b) =>
          b.run(linear, [b.upload(x, [m, k]), b.upload(w, [n, k]), b.upload(bias, [n])], {
            activation: 'gelu',
            preActivation: true,
          })[output]!,
        'f32',
        { rtol: 1e-4, atol: 2e-5 * Math.sqrt(k) },
      );
    }
  }, 300_000);

  it('refuses b larger than one binding when it is not stored [N, K], naming the argument', () => {
    const [k, n] = [64, 199];
    const a = gpu.upload(new Array(k).fill(0.5), [1, k]);
    const w = gpu.upload(new Array(n * k).fill(0.25), [k, n]);
    const run = () => gpu.run(matmul, [a, w], {});
    expect(run).toThrow(UnsupportedOnBackendError);
    expect(run).toThrow(/matmul.*'b'.*only b stored \[N, K\] is split.*<= 16384 bytes.*50944 bytes/);
  });
});
