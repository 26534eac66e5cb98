import { dot, expectClose, expectError, meta, random, run, thrown } from '@rayo/core-testkit';
import { describe, expect, it } from 'vitest';
import { InvalidArgumentError, ShapeError } from '../errors.js';
import { inferKernel } from '../kernelChecks.js';
import { Rng } from '../testing/random.js';
import { rope, ropeFrequencies } from './rope.js';

/** Rotates (a, b) by `angle`. */
function rotate(a: number, b: number, angle: number): [number, number] {
  return [a * Math.cos(angle) - b * Math.sin(angle), a * Math.sin(angle) + b * Math.cos(angle)];
}

describe('rope', () => {
  // One position (1), one head of 4: pair 0 turns by 1 · 10000^0 = 1, pair 1 by 1 · 10000^(−2/4) = 0.01.
  const x = { shape: [1, 1, 4], data: Float32Array.from([1, 2, 3, 4]) };

  it("'half' rotates the pairs (i, i + headDim/2)", () => {
    const { outputs, values } = run(rope, [x], { positionOffset: 1 });
    expect(outputs).toEqual([{ name: 'y', shape: [1, 1, 4], dtype: 'f32' }]);
    const [y0, y2] = rotate(1, 3, 1);
    const [y1, y3] = rotate(2, 4, 0.01);
    expectClose(values[0]!, [y0, y1, y2, y3], 1e-6);
  });

  it("'interleaved' rotates the pairs (2i, 2i + 1)", () => {
    const { values } = run(rope, [x], { positionOffset: 1, layout: 'interleaved' });
    expectClose(values[0]!, [...rotate(1, 2, 1), ...rotate(3, 4, 0.01)], 1e-6);
  });

  it('row s is at position positionOffset + s, with the frequencies of theta', () => {
    const x2 = { shape: [2, 1, 2], data: Float32Array.from([1, 0.5, 1, 0.5]) };
    const { values } = run(rope, [x2], { positionOffset: 3, theta: 2 });
    // headDim 2: one pair, frequency theta^0 = 1 whatever theta.
    expectClose(values[0]!, [...rotate(1, 0.5, 3), ...rotate(1, 0.5, 4)], 1e-6);
    const x4 = { shape: [1, 1, 4], data: Float32Array.from([1, 1, 1, 1]) };
    const y = run(rope, [x4], { positionOffset: 2, theta: 16 }).values[0]!;
    // Pair 1 turns by 2 · 16^(−1/2) = 0.5.
    expectClose([y[1]!, y[3]!], rotate(1, 1, 0.5), 1e-6);
  });

  it('leaves position 0 unchanged', () => {
    const v = { shape: [1, 3, 8], data: random(new Rng(1), 24) };
    expect(run(rope, [v]).values[0]).toEqual(v.data);
  });

  it("'half' and 'interleaved' are the same rotation with the pair elements placed differently", () => {
    const [seq, heads, d] = [4, 3, 8];
    const v = random(new Rng(2), seq * heads * d);
    // Element i of a 'half' head goes to 2i, element i + d/2 to 2i + 1.
    const place = (i: number) => (i < d / 2 ? 2 * i : 2 * (i - d / 2) + 1);
    const interleavedInput = new Float32Array(v.length);
    for (let base = 0; base < v.length; base += d) {
      for (let i = 0; i < d; i++) interleavedInput[base + place(i)] = v[base + i]!;
    }
    const shape = [seq, heads, d];
    const half = run(rope, [{ shape, data: v }], { positionOffset: 5, layout: 'half' }).values[0]!;
    const inter = run(rope, [{ shape, data: interleavedInput }], { positionOffset: 5, layout: 'interleaved' })
      .values[0]!;
    const placed = new Float32Array(v.length);
    for (let base = 0; base < v.length; base += d) {
      for (let i = 0; i < d; i++) placed[base + place(i)] = half[base + i]!;
    }
    expectClose(inter, placed, 1e-6);
    // On the same input, the two layouts give different results.
    const sameInput = run(rope, [{ shape, data: v }], { positionOffset: 5, layout: 'interleaved' })
      .values[0]!;
    expect(Math.max(...sameInput.map((value, i) => Math.abs(value - half[i]!)))).toBeGreaterThan(0.1);
  });

  for (const layout of ['half', 'interleaved'] as const) {
    it(`inverse undoes rope and is its transpose (${layout})`, () => {
      const rng = new Rng(3);
      const shape = [5, 3, 8];
      const v = random(rng, 120);
      const dy = random(rng, 120);
      const attrs = { positionOffset: 7, theta: 500, layout };
      const y = run(rope, [{ shape, data: v }], attrs).values[0]!;
      const back = run(rope, [{ shape, data: y as Float32Array }], { ...attrs, inverse: true }).values[0]!;
      expectClose(back, v, 1e-6);
      // The backward of a linear map is its transpose: <rope(x), dy> = <x, inverse(dy)>.
      const dx = run(rope, [{ shape, data: dy }], { ...attrs, inverse: true }).values[0]!;
      expect(dot(y, dy)).toBeCloseTo(dot(v, dx), 5);
    });
  }

  it('runs 67 × 13 × 128 quickly', () => {
    const v = { shape: [67, 13, 128], data: random(new Rng(4), 67 * 13 * 128) };
    const start = performance.now();
    run(rope, [v], { positionOffset: 4000 });
    expect(performance.now() - start).toBeLessThan(1000);
  });

  it('rejects x of a rank other than 3 and an odd headDim', () => {
    let e = thrown(() => inferKernel(rope, [meta([4, 8])]));
    expectError(e, ShapeError, 'rope', 'x', 'rank 3 [seq, heads, headDim]', 'rank 2 [4, 8]');
    e = thrown(() => inferKernel(rope, [meta([2, 3, 7])]));
    expectError(e, ShapeError, 'rope', 'x', 'an even last dimension', '[2, 3, 7]');
  });

  it('rejects a negative or fractional positionOffset, theta < 1 and an unknown layout', () => {
    let e = thrown(() => inferKernel(rope, [meta([2, 3, 8])], { positionOffset: -1 }));
    expectError(e, InvalidArgumentError, 'rope', 'attrs.positionOffset', '>= 0', 'got -1');
    e = thrown(() => inferKernel(rope, [meta([2, 3, 8])], { positionOffset: 1.5 }));
    expectError(e, InvalidArgumentError, 'rope', 'attrs.positionOffset', 'an integer', '1.5');
    e = thrown(() => inferKernel(rope, [meta([2, 3, 8])], { theta: 0 }));
    expectError(e, InvalidArgumentError, 'rope', 'attrs.theta', '>= 1', 'got 0');
    e = thrown(() => inferKernel(rope, [meta([2, 3, 8])], { theta: 0.5 }));
    expectError(e, InvalidArgumentError, 'rope', 'attrs.theta', '>= 1', 'got 0.5');
    e = thrown(() => inferKernel(rope, [meta([2, 3, 8])], { layout: 'split' as 'half' }));
    expectError(e, InvalidArgumentError, 'rope', 'attrs.layout', '"half" | "interleaved"', '"split"');
  });

  it('counts one read and one write of x', () => {
    const attrs = { positionOffset: 0, theta: 10000, inverse: false, layout: 'half' as const };
    expect(rope.cost!([meta([2, 3, 8])], attrs)).toEqual({ flops: 144, bytes: 384 });
  });
});

describe('rope with a device position', () => {
  it('rotates like the attribute and rejects a negative device value', () => {
    const rng = new Rng(5);
    const x = random(rng, 3 * 2 * 8);
    const metas = [meta([3, 2, 8]), { shape: [1], dtype: 'i32' as const }];
    const io = inferKernel(rope, metas);
    const y = rope.reference([x, Int32Array.of(17)], io.attrs, { inputs: metas, outputs: io.outputs })[0];
    expect(y).toEqual(run(rope, [{ shape: [3, 2, 8], data: x }], { positionOffset: 17 }).values[0]);
    const e = thrown(() =>
      rope.reference([x, Int32Array.of(-1)], io.attrs, { inputs: metas, outputs: io.outputs }),
    );
    expect(e).toBeInstanceOf(InvalidArgumentError);
    expect(e.argument).toBe('positionOffset');
  });
});

describe('rope with a frequency table', () => {
  function withTable(x: Float32Array, shape: number[], table: Float32Array, attrs: Record<string, unknown>) {
    const metas = [meta(shape), undefined, meta([table.length])];
    const io = inferKernel(rope, metas, attrs);
    return rope.reference([x, undefined, table], io.attrs, { inputs: metas, outputs: io.outputs })[0]!;
  }

  it('rotates pair i by position · frequencies[i], whatever theta says', () => {
    const x = Float32Array.from([1, 2, 3, 4]);
    const table = Float32Array.from([0.5, 0.125]);
    const y = withTable(x, [1, 1, 4], table, { positionOffset: 3, theta: 7 });
    const [y0, y2] = rotate(1, 3, 1.5);
    const [y1, y3] = rotate(2, 4, 0.375);
    expectClose(y, [y0, y1, y2, y3], 1e-6);
  });

  it("with theta's own frequencies equals rope without a table", () => {
    const rng = new Rng(9);
    const x = random(rng, 5 * 3 * 16);
    const table = ropeFrequencies(500000, 16);
    const y = withTable(x, [5, 3, 16], table, { positionOffset: 40, theta: 500000, layout: 'interleaved' });
    const plain = run(rope, [{ shape: [5, 3, 16], data: x }], {
      positionOffset: 40,
      theta: 500000,
      layout: 'interleaved',
    }).values[0]!;
    expectClose(y, Array.from(plain), 1e-5);
  });

  it('refuses a table of another length and values outside [0, 1]', () => {
    const e = thrown(() => inferKernel(rope, [meta([2, 3, 8]), undefined, meta([8])]));
    expectError(e, ShapeError, 'rope', 'frequencies', '[4] (headDim / 2)', '[8]');
    const bad = thrown(() =>
      withTable(random(new Rng(1), 8), [1, 1, 8], Float32Array.from([1, 0.5, 2, 0]), {}),
    );
    expect(bad).toBeInstanceOf(InvalidArgumentError);
    expect(bad.argument).toBe('frequencies');
    expect(bad.message).toContain('2 at index 2');
  });
});

describe('ropeFrequencies', () => {
  const base = (theta: number, d: number) => Array.from({ length: d / 2 }, (_, i) => theta ** ((-2 * i) / d));

  it('gives theta^(−2i/headDim) rounded once to f32', () => {
    expect(Array.from(ropeFrequencies(10000, 8))).toEqual(base(10000, 8).map(Math.fround));
  });

  it('divides every frequency by a linear factor, and each by its own factor', () => {
    expect(Array.from(ropeFrequencies(10000, 8, { type: 'linear', factor: 4 }))).toEqual(
      base(10000, 8).map((f) => Math.fround(f / 4)),
    );
    const factors = [1, 2, 3, 8];
    expect(Array.from(ropeFrequencies(500000, 8, { type: 'frequencyFactors', factors }))).toEqual(
      base(500000, 8).map((f, i) => Math.fround(f / factors[i]!)),
    );
  });

  it("follows Llama 3.1's three bands: short wavelengths kept, long ones divided, the middle interpolated", () => {
    const scaling = {
      type: 'llama3',
      factor: 8,
      lowFreqFactor: 1,
      highFreqFactor: 4,
      originalMaxPositionEmbeddings: 8192,
    } as const;
    const got = ropeFrequencies(500000, 128, scaling);
    const plain = base(500000, 128);
    let kept = 0;
    let divided = 0;
    let between = 0;
    plain.forEach((f, i) => {
      const wavelength = (2 * Math.PI) / f;
      if (wavelength < 2048) {
        kept++;
        expect(got[i]).toBe(Math.fround(f));
      } else if (wavelength > 8192) {
        divided++;
        expect(got[i]).toBe(Math.fround(f / 8));
      } else {
        between++;
        const smooth = (8192 / wavelength - 1) / 3;
        expect(got[i]).toBe(Math.fround((1 - smooth) * (f / 8) + smooth * f));
        expect(got[i]!).toBeLessThan(f);
        expect(got[i]!).toBeGreaterThan(f / 8);
      }
    });
    // Llama 3.1's 64 pairs fall into all three bands.
    expect([kept > 0, divided > 0, between > 0]).toEqual([true, true, true]);
  });

  it.each([
    ['theta', () => ropeFrequencies(0.5, 8), 'a finite number >= 1'],
    ['headDim', () => ropeFrequencies(10000, 7), 'an even integer'],
    ['scaling.factor', () => ropeFrequencies(10000, 8, { type: 'linear', factor: 0.5 }), '>= 1'],
    [
      'scaling.highFreqFactor',
      () =>
        ropeFrequencies(10000, 8, {
          type: 'llama3',
          factor: 8,
          lowFreqFactor: 4,
          highFreqFactor: 1,
          originalMaxPositionEmbeddings: 8192,
        }),
      'lowFreqFactor (4)',
    ],
    [
      'scaling.factors',
      () => ropeFrequencies(10000, 8, { type: 'frequencyFactors', factors: [1, 2] }),
      '4 factors',
    ],
  ])('refuses a bad %s, naming it', (argument, call, expected) => {
    const e = thrown(call);
    expect(e).toBeInstanceOf(InvalidArgumentError);
    expect(e.argument).toBe(argument);
    expect(e.message).toContain(expected);
  });
});
