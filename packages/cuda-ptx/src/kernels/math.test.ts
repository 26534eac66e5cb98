import { geluOf, sigmoidOf, siluOf } from '@rayo/core';
import { FakeLibCuda, PtxInterpreter } from '@rayo/cuda-testkit';
import { describe, expect, it } from 'vitest';
import { CudaDriver } from '../driver/driver.js';
import { CommandRecorder } from '../encoder.js';
import type { KernelBuilder } from '../ptx/kernel.js';
import { PtxModule } from '../ptx/module.js';
import type { F32 } from '../ptx/operands.js';
import { assemblePtx, ptxasTestGate } from '../ptx/ptxas.js';
import { expF32, geluF32, geluGradF32, sigmoidF32, siluF32, siluGradF32, tanhF32 } from './math.js';

// The helpers run in the PTX interpreter, where ex2.approx is exact; the
// hardware adds at most 2 ulp to each exp. The bounds below leave that room
// and are still far tighter than the 1e-5 conformance tolerance.

const fake = new FakeLibCuda();
new PtxInterpreter(fake).attach();
const driver = new CudaDriver(fake);
const stream = driver.createStream();

function evaluate(name: string, fn: (k: KernelBuilder, x: F32) => F32, xs: readonly number[]): Float32Array {
  const module = () => {
    const m = new PtxModule();
    m.entry('apply', { x: 'ptr', y: 'ptr', n: 'u32' }, (k, p) => {
      const x = k.globalPointer(p.x);
      const y = k.globalPointer(p.y);
      k.gridStrideLoop(k.ldParam(p.n), (i) => {
        const v = k.ldGlobal('f32', k.reg('f32'), k.elementAddress(x, i, 4));
        k.stGlobal('f32', k.elementAddress(y, i, 4), fn(k, v));
      });
    });
    return m;
  };
  const n = xs.length;
  const x = driver.alloc(n * 4);
  const y = driver.alloc(n * 4);
  fake.memory.setF32(x.ptr, new Float32Array(xs));
  const recorder = new CommandRecorder(driver);
  recorder.launch({
    key: `test/math/${name}`,
    module,
    entry: 'apply',
    grid: 8,
    block: 128,
    args: { x: x.ptr, y: y.ptr, n },
  });
  driver.enqueue(recorder.commands, stream);
  const out = fake.memory.f32(y.ptr, n);
  driver.free(x);
  driver.free(y);
  return out;
}

/** Distance in f32 ulps of the expected value (an ulp of the smallest normal below it). */
function ulps(actual: number, expected: number): number {
  if (Number.isNaN(expected)) return Number.isNaN(actual) ? 0 : Number.POSITIVE_INFINITY;
  if (!Number.isFinite(expected)) return actual === expected ? 0 : Number.POSITIVE_INFINITY;
  const e = Math.fround(expected);
  const exponent = Math.max(Math.floor(Math.log2(Math.abs(e) || 2 ** -126)), -126);
  return Math.abs(actual - expected) / 2 ** (exponent - 23);
}

function sweep(lo: number, hi: number, count: number): number[] {
  return Array.from({ length: count }, (_, i) => Math.fround(lo + ((hi - lo) * i) / (count - 1)));
}

function worst(actual: Float32Array, xs: readonly number[], ref: (x: number) => number) {
  let max = 0;
  let at = 0;
  xs.forEach((x, i) => {
    const u = ulps(actual[i]!, ref(x));
    if (!(u <= max)) {
      max = u;
      at = x;
    }
  });
  return { max, at };
}

const SPECIALS = [
  0,
  -0,
  1e-30,
  -1e-30,
  2 ** -140,
  Number.POSITIVE_INFINITY,
  Number.NEGATIVE_INFINITY,
  Number.NaN,
];

describe('f32 math helpers (interpreted)', () => {
  it('exp is within 2 ulp from the smallest subnormal result to overflow', () => {
    const xs = [...sweep(-87, 88.7, 4001), ...sweep(-1, 1, 501)];
    const w = worst(evaluate('exp', expF32, xs), xs, Math.exp);
    expect(w.max, `at x = ${w.at}`).toBeLessThanOrEqual(2);
    const [big, tiny, inf, ninf, nan, over, under, zero] = evaluate('exp', expF32, [
      88.72,
      -103,
      Number.POSITIVE_INFINITY,
      Number.NEGATIVE_INFINITY,
      Number.NaN,
      89,
      -105,
      0,
    ]);
    expect(ulps(big!, Math.exp(Math.fround(88.72)))).toBeLessThanOrEqual(2);
    expect(tiny).toBeGreaterThanOrEqual(0);
    expect(tiny).toBeLessThan(2 ** -140);
    expect([inf, ninf, over, under, zero]).toEqual([
      Number.POSITIVE_INFINITY,
      0,
      Number.POSITIVE_INFINITY,
      0,
      1,
    ]);
    expect(nan).toBeNaN();
  });

  it('sigmoid is within 3 ulp, also far into the negative tail', () => {
    const xs = sweep(-87, 30, 4001);
    const w = worst(evaluate('sigmoid', sigmoidF32, xs), xs, sigmoidOf);
    expect(w.max, `at x = ${w.at}`).toBeLessThanOrEqual(3);
    const s = evaluate('sigmoid', sigmoidF32, SPECIALS);
    expect([...s.subarray(0, 7)]).toEqual([0.5, 0.5, 0.5, 0.5, 0.5, 1, 0]);
    expect(s[7]).toBeNaN();
  });

  it('tanh is within 3 ulp everywhere, including next to 0', () => {
    const xs = [...sweep(-12, 12, 4001), ...sweep(-0.2, 0.2, 801), 1e-8, -3e-5, 0.124, 0.126];
    const w = worst(evaluate('tanh', tanhF32, xs), xs, Math.tanh);
    expect(w.max, `at x = ${w.at}`).toBeLessThanOrEqual(3);
    const t = evaluate('tanh', tanhF32, SPECIALS);
    expect([...t.subarray(0, 7)]).toEqual([0, -0, 1e-30, -1e-30, 2 ** -140, 1, -1].map(Math.fround));
    expect(t[7]).toBeNaN();
  });

  it('gelu, silu and their derivatives are far inside the conformance tolerance', () => {
    const xs = sweep(-9, 9, 3001);
    const k0 = Math.sqrt(2 / Math.PI);
    const geluGrad = (x: number) => {
      const t = Math.tanh(k0 * (x + 0.044715 * x ** 3));
      return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * k0 * (1 + 3 * 0.044715 * x * x);
    };
    const siluGrad = (x: number) => sigmoidOf(x) * (1 + x * (1 - sigmoidOf(x)));
    const cases: [string, (k: KernelBuilder, x: F32) => F32, (x: number) => number][] = [
      ['gelu', geluF32, geluOf],
      ['geluGrad', geluGradF32, geluGrad],
      ['silu', siluF32, siluOf],
      ['siluGrad', siluGradF32, siluGrad],
    ];
    for (const [name, fn, ref] of cases) {
      const out = evaluate(name, fn, xs);
      // Five and 250 times tighter than the conformance tolerance. In the negative tails
      // the argument of exp is itself rounded, and exp multiplies that error by
      // |argument|; near the derivatives' zeros their terms cancel. The values are
      // small there, which the absolute part covers.
      xs.forEach((x, i) => {
        const e = ref(x);
        const err = Math.abs(out[i]! - e);
        expect(err, `${name}(${x}) = ${out[i]}, expected ${e}`).toBeLessThanOrEqual(
          2e-6 * Math.abs(e) + 4e-8,
        );
      });
    }
  });

  it('keeps NaN and saturates at ±inf in gelu and the derivatives', () => {
    const inputs = [Number.NaN, Number.POSITIVE_INFINITY, Number.NEGATIVE_INFINITY, 1e20, -1e20, 40, -40];
    const [gNaN, gInf, gNinf, gBig, gSmall, g40, gm40] = evaluate('geluGrad', geluGradF32, inputs);
    expect(gNaN).toBeNaN();
    expect([gInf, gNinf, gBig, gSmall, g40, gm40]).toEqual([1, 0, 1, 0, 1, 0]);
    const [yNaN, yInf, , yBig, ySmall] = evaluate('gelu', geluF32, inputs);
    expect(yNaN).toBeNaN();
    expect(yInf).toBe(Number.POSITIVE_INFINITY);
    expect(yBig).toBe(Math.fround(1e20));
    expect(ySmall === 0).toBe(true);
  });
});

const gate = ptxasTestGate();
describe.skipIf(gate.skip)(`the math helpers assemble (${gate.reason})`, () => {
  it('for sm_75 and sm_90', () => {
    const m = new PtxModule();
    const helpers = { expF32, sigmoidF32, tanhF32, geluF32, geluGradF32, siluF32, siluGradF32 };
    m.entry('all', { x: 'ptr', y: 'ptr' }, (k, p) => {
      const x = k.ldGlobal('f32', k.reg('f32'), k.globalPointer(p.x));
      const y = k.globalPointer(p.y);
      Object.values(helpers).forEach((fn, i) => {
        k.stGlobal('f32', k.elementAddress(y, i, 4), fn(k, x));
      });
    });
    for (const arch of ['sm_75', 'sm_90']) {
      const result = assemblePtx(m.emit(), arch);
      expect(result.log, arch).toBe('');
      expect(result.ok).toBe(true);
    }
  });
});
