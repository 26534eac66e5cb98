import { describe, expect, it } from 'vitest';
import { geometryKey, type RowGeometry } from './rowReduce.js';
import { SOFTMAX_DECLS, softmaxGeometry, softmaxKey, softmaxModule } from './softmax.js';

const ALIGNED = [1n << 30n, 2n << 30n, 3n << 30n];
const decl = (name: string) => SOFTMAX_DECLS.find((d) => d.spec.name === name)!;

describe('softmax kernels', () => {
  it('keeps rows in registers up to the register budget, then streams them', () => {
    const softmax = decl('softmax');
    expect(softmaxGeometry(softmax, 3, ALIGNED)).toEqual({ threads: 4, block: 128, width: 1, slots: 1 });
    expect(softmaxGeometry(softmax, 512, ALIGNED)).toEqual({ threads: 32, block: 128, width: 4, slots: 4 });
    expect(softmaxGeometry(softmax, 4096, ALIGNED)).toEqual({ threads: 256, block: 256, width: 4, slots: 4 });
    // Odd rows: single accesses; the smallest block that holds the row in its register budget.
    expect(softmaxGeometry(softmax, 4099, ALIGNED)).toEqual({ threads: 512, block: 512, width: 1, slots: 9 });
    expect(softmaxGeometry(softmax, 65536, ALIGNED).slots).toBe(0);
    // The longest rows held in registers, and one past them.
    expect(softmaxGeometry(softmax, 8192, ALIGNED)).toEqual({ threads: 512, block: 512, width: 4, slots: 4 });
    expect(softmaxGeometry(softmax, 8196, ALIGNED).slots).toBe(0);
    // A misaligned operand gives narrower accesses.
    expect(softmaxGeometry(softmax, 512, [...ALIGNED, (1n << 30n) + 8n]).width).toBe(2);
  });

  it('names the geometry in the key and reads inputs once through the non-coherent cache', () => {
    const g: RowGeometry = { threads: 32, block: 128, width: 4, slots: 2 };
    expect(softmaxKey(decl('softmax'), g)).toBe(`softmax/softmax/${geometryKey(g)}`);
    const text = softmaxModule(decl('softmax'), g).emit();
    expect(text.match(/ld\.global\.nc\.v4\.f32/g)).toHaveLength(2);
    expect(text.match(/st\.global\.v4\.f32/g)).toHaveLength(2);
    expect(text).not.toContain('bar.sync');
    expect(text).toContain('.reqntid 128, 1, 1');
  });
});
