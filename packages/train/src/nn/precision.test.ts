import {
  bf16BitsToF32,
  createCpuBackend,
  f16BitsToF32,
  f32ToBf16Bits,
  f32ToF16Bits,
  InvalidArgumentError,
} from '@rayo/core';
import { describe, expect, it } from 'vitest';
import { scale } from '../autograd/ops/elementwise.js';
import { crossEntropy } from '../autograd/ops/loss.js';
import { Tape, type Variable } from '../autograd/tape.js';
import { CausalLM } from '../causalLM.js';
import type { TrainPrecision } from '../precision.js';
import { Rng } from '../random.js';
import { Linear } from './linear.js';

const backend = createCpuBackend();
/** x rounded to nearest even in each half dtype, independently of the kernels' rounding helpers. */
const ROUND = {
  bf16: (x: number) => bf16BitsToF32(f32ToBf16Bits(x)),
  f16: (x: number) => f16BitsToF32(f32ToF16Bits(x)),
} as const;

/** An element of a matrix by row and column. */
type Accessor = (row: number, col: number) => number;

/** y[i, j] = Σ_p a(i, p) · b(p, j) in f64, for accessors of op(a) [m, k] and op(b) [k, n]. */
function product(m: number, k: number, n: number, a: Accessor, b: Accessor): Float64Array {
  const y = new Float64Array(m * n);
  for (let i = 0; i < m; i++)
    for (let j = 0; j < n; j++) {
      let s = 0;
      for (let p = 0; p < k; p++) s += a(i, p) * b(p, j);
      y[i * n + j] = s;
    }
  return y;
}

/** Element (r, c) of row-major `data` with `cols` columns. */
function at(data: Float32Array, cols: number): Accessor {
  return (r, c) => data[r * cols + c]!;
}

/** Element (r, c) of the transpose of row-major `data` with `cols` columns. */
function atT(data: Float32Array, cols: number): Accessor {
  return (r, c) => data[c * cols + r]!;
}

/** `element` rounded to `half`, as a product under that policy takes it. */
function roundedTo(half: 'bf16' | 'f16', element: Accessor): Accessor {
  return (r, c) => ROUND[half](element(r, c));
}

function expectClose(got: Float32Array, want: Float64Array, rtol: number): void {
  expect(got.length).toBe(want.length);
  const scale = Math.max(...want.map(Math.abs));
  for (let i = 0; i < got.length; i++) expect(Math.abs(got[i]! - want[i]!)).toBeLessThan(rtol * scale);
}

describe.each(['bf16', 'f16'] as const)("Linear under precision '%s'", (half) => {
  const rounded = (element: Accessor) => roundedTo(half, element);
  const other = half === 'bf16' ? 'f16' : 'bf16';

  it('rounds the operands of y, dx and dw to its half dtype and sums in f64-close f32, the gradients f32', async () => {
    // Odd sizes; x [m, k], w [n, k], dy [m, n].
    const [m, k, n] = [7, 13, 5];
    const rng = new Rng(11);
    const layer = new Linear(backend, k, n, { rng }).setPrecision(half);
    const x = rng.uniformArray(m * k, -1, 1);
    const dy = rng.uniformArray(m * n, -1, 1);
    const w = (await layer.weight.value.read()) as Float32Array;
    const b = (await layer.bias!.value.read()) as Float32Array;
    using tape = new Tape(backend);
    const xv = tape.variable(tape.upload(x, [m, k]));
    const y = layer.forward(tape, xv);
    tape.backward(y, { seed: tape.upload(dy, [m, n]) });
    const [gotY, dx, dw, db] = (await Promise.all([
      y.value.read(),
      xv.grad!.read(),
      layer.weight.grad!.read(),
      layer.bias!.grad!.read(),
    ])) as Float32Array[];
    expect([layer.weight.grad!.dtype, layer.bias!.grad!.dtype, xv.grad!.dtype]).toEqual([
      'f32',
      'f32',
      'f32',
    ]);
    const wantY = product(m, k, n, rounded(at(x, k)), rounded(atT(w, k))).map((v, i) => v + b[i % n]!);
    expectClose(gotY!, wantY, 1e-5);
    expectClose(dx!, product(m, n, k, rounded(at(dy, n)), rounded(at(w, k))), 1e-5);
    expectClose(dw!, product(n, m, k, rounded(atT(dy, n)), rounded(at(x, k))), 1e-5);
    expectClose(
      db!,
      Float64Array.from({ length: n }, (_, j) => dy.reduce((s, v, i) => (i % n === j ? s + v : s), 0)),
      1e-6,
    );
    // The exact f32 product differs, and so does the other half dtype's: this rounding did happen.
    const exact = product(m, k, n, at(x, k), atT(w, k)).map((v, i) => v + b[i % n]!);
    expect(Math.max(...exact.map((v, i) => Math.abs(v - gotY![i]!)))).toBeGreaterThan(1e-5);
    const wrong = product(m, k, n, roundedTo(other, at(x, k)), roundedTo(other, atT(w, k))).map(
      (v, i) => v + b[i % n]!,
    );
    expect(Math.max(...wrong.map((v, i) => Math.abs(v - gotY![i]!)))).toBeGreaterThan(1e-5);
    layer.dispose();
  });

  it('keeps a half copy of its input for dW, so that its scope frees the f32 one', () => {
    for (const precision of ['f32', half] as const) {
      const layer = new Linear(backend, 6, 5, { seed: 2, bias: false }).setPrecision(precision);
      using tape = new Tape(backend);
      const input = tape.variable(tape.upload(new Rng(4).uniformArray(7 * 6, -1, 1), [7, 6]));
      let x: Variable | undefined;
      tape.scope(() => {
        // scale's backward reads nothing: only the layer's rule could keep x alive.
        x = scale(tape, input, 2);
        return layer.forward(tape, x);
      });
      // The next f32 output of x's size takes x's memory exactly when no rule reads x.
      const next = scale(tape, input, 3);
      expect(next.value === x!.value, precision).toBe(precision === half);
      layer.dispose();
    }
  });
});

describe('the precision policies', () => {
  it('refuses an unknown policy, naming it', () => {
    const layer = new Linear(backend, 2, 2);
    expect(() => layer.setPrecision('fp8' as TrainPrecision)).toThrow(InvalidArgumentError);
    expect(() => layer.setPrecision('fp8' as TrainPrecision)).toThrow(/'f32', 'tf32', 'bf16', 'f16'/);
    layer.dispose();
  });
});

describe('a causal language model under each precision', () => {
  // T 9 × B 2 rows; d 16, two heads, one block, SwiGLU 24, vocab 11.
  const options = { vocab: 11, dim: 16, heads: 2, hidden: 24, blocks: 1, seed: 3 };
  const rng = new Rng(5);
  const ids = Int32Array.from({ length: 18 }, () => rng.int(11));
  const targets = Int32Array.from({ length: 18 }, () => rng.int(11));

  async function gradients(precision: TrainPrecision) {
    const model = new CausalLM(backend, { ...options, precision });
    expect(model.blocks[0]!.attn.q.precision).toBe(precision);
    using tape = new Tape(backend);
    const loss = crossEntropy(
      tape,
      model.forward(tape, tape.upload(ids, [9, 2], 'i32')),
      tape.upload(targets, [18], 'i32'),
    );
    tape.backward(loss);
    const value = ((await loss.value.read()) as Float32Array)[0]!;
    const grads = new Map<string, Float32Array>();
    for (const [name, p] of model.namedParameters()) {
      expect(p.grad!.dtype).toBe('f32');
      expect(p.value.dtype).toBe('f32');
      grads.set(name, (await p.grad!.read()) as Float32Array);
    }
    model.dispose();
    return { value, grads };
  }

  it('bf16 and f16 gradients are the f32 ones within their rounding, tf32 on cpu the f32 ones', async () => {
    const exact = await gradients('f32');
    const half = await gradients('bf16');
    const f16 = await gradients('f16');
    const tf32 = await gradients('tf32');
    expect(Math.abs(half.value - exact.value)).toBeLessThan(1e-2 * exact.value);
    expect(Math.abs(f16.value - exact.value)).toBeLessThan(2e-3 * exact.value);
    let moved = 0;
    let movedF16 = 0;
    for (const [name, g] of exact.grads) {
      const h = half.grads.get(name)!;
      const hf = f16.grads.get(name)!;
      let diffF16 = 0;
      for (let i = 0; i < g.length; i++) diffF16 += (hf[i]! - g[i]!) ** 2;
      let diff = 0;
      let norm = 0;
      for (let i = 0; i < g.length; i++) {
        diff += (h[i]! - g[i]!) ** 2;
        norm += g[i]! ** 2;
      }
      // A few bf16 roundings (2^-9 each) through two layers of products.
      expect(Math.sqrt(diff), name).toBeLessThan(0.03 * Math.sqrt(norm));
      moved = Math.max(moved, Math.sqrt(diff / norm));
      // f16 rounds to 2^-12: eight times closer than bf16.
      expect(Math.sqrt(diffF16), name).toBeLessThan(0.005 * Math.sqrt(norm));
      movedF16 = Math.max(movedF16, Math.sqrt(diffF16 / norm));
      // The cpu backend computes tf32 exactly, as the spec allows.
      expect(tf32.grads.get(name), name).toEqual(g);
    }
    expect(moved).toBeGreaterThan(1e-4);
    expect(movedF16).toBeGreaterThan(1e-6);
    expect(movedF16).toBeLessThan(moved);
  });
});
