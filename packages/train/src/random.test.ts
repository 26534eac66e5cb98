import { describe, expect, it } from 'vitest';
import { Rng } from './random.js';

describe('Rng', () => {
  it('fillUniform gives the numbers uniform gives one by one, and leaves the same state', () => {
    const one = new Rng(7);
    const many = new Rng(7);
    one.uint32();
    many.uint32();
    const expected = Float32Array.from({ length: 1001 }, () => one.uniform(-0.3, 0.5));
    const got = many.fillUniform(new Float32Array(1001).fill(Number.NaN), -0.3, 0.5);
    expect(got).toEqual(expected);
    expect(many.uint32()).toBe(one.uint32());
    expect(new Rng(3).uniformArray(5, 1, 2)).toEqual(new Rng(3).fillUniform(new Float32Array(5), 1, 2));
  });
});
