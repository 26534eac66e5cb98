import { dot, expectClose, expectError, meta, random, run, thrown } from '@rayo/core-testkit';
import { describe, expect, it } from 'vitest';
import { InvalidArgumentError, ShapeError } from '../errors.js';
import { inferKernel } from '../kernelChecks.js';
import { Rng } from '../testing/random.js';
import { rope } from './rope.js';

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

  it('rejects a negative or fractional positionOffset, theta <= 0 and an unknown layout', () => {
    let e = thrown(() => inferKernel(rope, [meta([2, 3, 8])], { positionOffset: -1 }));
    expectError(e, InvalidArgumentError, 'rope', 'attrs.positionOffset', '>= 0', 'got -1');
    e = thrown(() => inferKernel(rope, [meta([2, 3, 8])], { positionOffset: 1.5 }));
    expectError(e, InvalidArgumentError, 'rope', 'attrs.positionOffset', 'an integer', '1.5');
    e = thrown(() => inferKernel(rope, [meta([2, 3, 8])], { theta: 0 }));
    expectError(e, InvalidArgumentError, 'rope', 'attrs.theta', '> 0', 'got 0');
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
