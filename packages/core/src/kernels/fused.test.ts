import { meta, runFirst as run } from '@rayo/core-testkit';
import { describe, expect, it } from 'vitest';
import { InvalidArgumentError, ShapeError } from '../errors.js';
import { inferKernel } from '../kernelChecks.js';
import { Rng } from '../testing/random.js';
import { LINEAR_ACTIVATIONS, type LinearActivation } from './activations.js';
import {
  biasAdd,
  gelu,
  geluBackward,
  relu,
  reluBackward,
  sigmoid,
  sigmoidBackward,
  siluBackward,
  silu as siluSpec,
  swiglu,
  tanh,
  tanhBackward,
} from './elementwise.js';
import { biasActivationBackward, gateUpSwiglu, linear, rmsNormMatmul, rmsNormMatmul3 } from './fused.js';
import { matmul } from './matmul.js';
import { rmsNorm } from './normalization.js';

const t = (shape: number[], values: number[]) => ({ shape, data: Float32Array.from(values) });
const silu = (v: number) => v / (1 + Math.exp(-v));

describe('gateUpSwiglu reference', () => {
  it('computes a hand-worked 1×2 → 2 example', () => {
    const y = run(gateUpSwiglu, [t([1, 2], [1, 2]), t([2, 2], [1, 0, 0.5, -1]), t([2, 2], [2, 1, 1, 1])]);
    // gate = [1, -1.5], up = [4, 3]
    expect(y[0]).toBeCloseTo(silu(1) * 4, 6);
    expect(y[1]).toBeCloseTo(silu(-1.5) * 3, 6);
  });

  it('equals rmsNorm, two matmuls and swiglu composed', () => {
    const rng = new Rng(7);
    const [m, k, n] = [3, 37, 11];
    const r = (size: number) => Float32Array.from({ length: size }, () => rng.uniform(-1, 1));
    const x = { shape: [m, k], data: r(m * k) };
    const wg = { shape: [n, k], data: r(n * k) };
    const wu = { shape: [n, k], data: r(n * k) };
    const nw = { shape: [k], data: r(k) };
    for (const norm of [false, true]) {
      const xn = norm ? { shape: [m, k], data: run(rmsNorm, [x, nw], { eps: 1e-5 }) } : x;
      const g = run(matmul, [xn, wg], { transB: true });
      const u = run(matmul, [xn, wu], { transB: true });
      const want = run(swiglu, [
        { shape: [m, n], data: g },
        { shape: [m, n], data: u },
      ]);
      const got = run(gateUpSwiglu, norm ? [x, wg, wu, nw] : [x, wg, wu], { eps: 1e-5 });
      for (let i = 0; i < want.length; i++) expect(got[i]).toBeCloseTo(want[i]!, 4);
    }
  });

  it('names the argument and the expected shape in its errors', () => {
    const call = () => inferKernel(gateUpSwiglu, [meta([1, 8]), meta([4, 8]), meta([4, 8]), meta([4])]);
    expect(call).toThrow(ShapeError);
    expect(call).toThrow(/gateUpSwiglu.*normWeight/s);
    expect(call).toThrow(/dimension 0 = 8/);
    expect(() => inferKernel(gateUpSwiglu, [meta([1, 8]), meta([4, 8]), meta([5, 8])])).toThrow(/wUp/);
  });
});

describe('rmsNormMatmul reference', () => {
  it('equals rmsNorm then a product with the weight stored [N, K]', () => {
    const rng = new Rng(3);
    const [m, k, n] = [2, 29, 5];
    const r = (size: number) => Float32Array.from({ length: size }, () => rng.uniform(-1, 1));
    const x = { shape: [m, k], data: r(m * k) };
    const nw = { shape: [k], data: r(k) };
    const w = { shape: [n, k], data: r(n * k) };
    const h = { shape: [m, k], data: run(rmsNorm, [x, nw], { eps: 1e-3 }) };
    const want = run(matmul, [h, w], { transB: true });
    const got = run(rmsNormMatmul, [x, nw, w], { eps: 1e-3 });
    for (let i = 0; i < want.length; i++) expect(got[i]).toBeCloseTo(want[i]!, 5);
  });

  it('normalises a hand-worked row', () => {
    // x = [3, 4]: mean(x²) = 12.5, so x̂ = x / sqrt(12.5 + eps).
    const y = run(rmsNormMatmul, [t([1, 2], [3, 4]), t([2], [1, 2]), t([1, 2], [1, 1])], { eps: 1e-6 });
    expect(y[0]).toBeCloseTo((3 + 8) / Math.sqrt(12.5 + 1e-6), 6);
  });

  it('names the argument in its errors', () => {
    expect(() => inferKernel(rmsNormMatmul, [meta([1, 8]), meta([8]), meta([8, 4])])).toThrow(
      /rmsNormMatmul.*'w'.*dimension 1 = 8/s,
    );
  });
});

describe('rmsNormMatmul3 reference', () => {
  const rng = new Rng(5);
  const r = (shape: number[]) => ({
    shape,
    data: Float32Array.from({ length: shape.reduce((a, b) => a * b, 1) }, () => rng.uniform(-1, 1)),
  });

  it('gives each weight the output rmsNormMatmul gives it alone', () => {
    const [m, k] = [3, 23];
    const x = r([m, k]);
    const nw = r([k]);
    const ws = [r([7, k]), r([1, k]), r([4, k])];
    for (const count of [1, 2, 3]) {
      const weights = ws.slice(0, count);
      const metas = [x, nw, ...weights].map((a) => meta(a.shape));
      const io = inferKernel(rmsNormMatmul3, metas, { eps: 1e-3 });
      expect(io.outputs.map((o) => o.shape)).toEqual(weights.map((w) => [m, w.shape[0]]));
      const got = rmsNormMatmul3.reference(
        [x, nw, ...weights].map((a) => a.data),
        io.attrs,
        { inputs: metas, outputs: io.outputs },
      );
      weights.forEach((w, i) => {
        expect(Array.from(got[i]!)).toEqual(Array.from(run(rmsNormMatmul, [x, nw, w], { eps: 1e-3 })));
      });
    }
  });

  it('names the argument in its errors', () => {
    expect(() => inferKernel(rmsNormMatmul3, [meta([1, 8]), meta([8]), meta([4, 8]), meta([2, 7])])).toThrow(
      /rmsNormMatmul3.*'w1'.*dimension 1 = 8/s,
    );
    expect(() =>
      inferKernel(rmsNormMatmul3, [meta([1, 8]), meta([8]), meta([4, 8]), undefined, meta([2, 8])]),
    ).toThrow(/rmsNormMatmul3.*'w1'/s);
  });
});

describe('linear and biasActivationBackward references', () => {
  const rng = new Rng(11);
  const r = (shape: number[]) => ({
    shape,
    data: Float32Array.from({ length: shape.reduce((a, b) => a * b, 1) }, () => rng.uniform(-2, 2)),
  });
  const unary = { relu, gelu, silu: siluSpec, sigmoid, tanh } as const;
  // The existing backward kernels take x (relu, gelu, silu) or y (sigmoid, tanh).
  const backward = {
    relu: [reluBackward, 'x'],
    gelu: [geluBackward, 'x'],
    silu: [siluBackward, 'x'],
    sigmoid: [sigmoidBackward, 'y'],
    tanh: [tanhBackward, 'y'],
  } as const;

  it('equals matmul, biasAdd and the activation composed, for every activation', () => {
    const [m, k, n] = [3, 19, 7];
    const x = r([m, k]);
    const w = r([n, k]);
    const b = r([n]);
    const z = {
      shape: [m, n],
      data: run(biasAdd, [{ shape: [m, n], data: run(matmul, [x, w], { transB: true }) }, b]),
    };
    for (const activation of LINEAR_ACTIVATIONS) {
      const want = activation === 'none' ? z.data : run(unary[activation], [z]);
      const metas = [x, w, b].map((a) => meta(a.shape));
      const io = inferKernel(linear, metas, { activation, preActivation: activation !== 'none' });
      const [y, zOut] = linear.reference([x.data, w.data, b.data], io.attrs, {
        inputs: metas,
        outputs: io.outputs,
      });
      for (let i = 0; i < want.length; i++) expect(y![i]).toBeCloseTo(want[i]!, 5);
      if (activation !== 'none')
        for (let i = 0; i < z.data.length; i++) expect(zOut![i]).toBeCloseTo(z.data[i]!, 5);
    }
    expect(Array.from(run(linear, [x, w]))).toEqual(Array.from(run(matmul, [x, w], { transB: true })));
  });

  it('backward equals the activation backward and the column sums of its result', () => {
    const [m, n] = [5, 6];
    const dy = r([m, n]);
    const z = r([m, n]);
    for (const activation of LINEAR_ACTIVATIONS) {
      const metas = activation === 'none' ? [meta([m, n])] : [meta([m, n]), meta([m, n])];
      const io = inferKernel(biasActivationBackward, metas, { activation });
      const [dz, db] = biasActivationBackward.reference(
        activation === 'none' ? [dy.data] : [dy.data, z.data],
        io.attrs,
        { inputs: metas, outputs: io.outputs },
      );
      let want: ArrayLike<number> = dy.data;
      if (activation !== 'none') {
        const [spec, second] = backward[activation as Exclude<LinearActivation, 'none'>];
        const saved = second === 'x' ? z : { shape: z.shape, data: run(unary[activation], [z]) };
        want = run(spec, [dy, saved]);
      }
      for (let i = 0; i < want.length; i++) expect(dz![i]).toBeCloseTo(want[i]!, 5);
      for (let j = 0; j < n; j++) {
        let s = 0;
        for (let i = 0; i < m; i++) s += want[i * n + j]!;
        expect(db![j]).toBeCloseTo(s, 5);
      }
    }
  });

  it("takes relu's output for z", () => {
    const dy = r([4, 3]);
    const z = r([4, 3]);
    const y = { shape: z.shape, data: run(relu, [z]) };
    const viaZ = run(biasActivationBackward, [dy, z], { activation: 'relu' });
    expect(Array.from(run(biasActivationBackward, [dy, y], { activation: 'relu' }))).toEqual(
      Array.from(viaZ),
    );
  });

  it('names the argument in its errors', () => {
    expect(() => inferKernel(linear, [meta([2, 8]), meta([4, 7])])).toThrow(/linear.*'w'.*dimension 1 = 8/s);
    expect(() => inferKernel(linear, [meta([2, 8]), meta([4, 8]), meta([5])])).toThrow(
      /linear.*'bias'.*dimension 0 = 4/s,
    );
    expect(() => inferKernel(linear, [meta([2, 8]), meta([4, 8])], { preActivation: true })).toThrow(
      InvalidArgumentError,
    );
    expect(() => inferKernel(linear, [meta([2, 8]), meta([4, 8])], { activation: 'swish' as never })).toThrow(
      /attrs.activation/,
    );
    expect(() => inferKernel(biasActivationBackward, [meta([2, 4])], { activation: 'gelu' })).toThrow(
      /biasActivationBackward.*'z'/s,
    );
    expect(() => inferKernel(biasActivationBackward, [meta([2, 4]), meta([2, 4])])).toThrow(
      /biasActivationBackward.*'z'/s,
    );
    expect(() =>
      inferKernel(biasActivationBackward, [meta([2, 4]), meta([4, 2])], { activation: 'relu' }),
    ).toThrow(ShapeError);
  });
});
