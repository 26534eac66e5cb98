import { describe, expect, it } from 'vitest';
import { int8ActivationBlocks } from './int8Activations.js';

describe('int8ActivationBlocks', () => {
  it('keeps each block within half a step of x, its largest element exact, ties to even', () => {
    const x = Float32Array.from({ length: 70 }, (_, i) => Math.sin(i * 0.7) * (1 + (i % 5)));
    const { values, d } = int8ActivationBlocks(x, 2, 35);
    expect(d).toHaveLength(4);
    for (let r = 0; r < 2; r++)
      for (let i = 0; i < 35; i++) {
        const step = d[r * 2 + (i >> 5)]!;
        expect(Math.abs(values[r * 35 + i]! - x[r * 35 + i]!)).toBeLessThanOrEqual(step / 2 + 1e-7);
        expect(Math.abs(values[r * 35 + i]! / step)).toBeLessThanOrEqual(127);
      }
    // A block of zeros stays zero; 127 / 2 · (1/2 step) ties go to even codes.
    const zeros = int8ActivationBlocks([0, 0, 0], 1, 3);
    expect(Array.from(zeros.values)).toEqual([0, 0, 0]);
    const ties = int8ActivationBlocks([127, 0.5, 1.5, 2.5], 1, 4);
    expect(Array.from(ties.values)).toEqual(
      [127, 0, 2, 2].map((q) => q * Math.fround(127 * Math.fround(1 / 127))),
    );
  });
});
