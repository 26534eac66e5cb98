import { QUANT_FORMATS, quantLayout } from '@rayo/core';
import { describe, expect, it } from 'vitest';
import { QUANT_STREAM_MAX_ROWS, QUANTIZED_KERNELS, quantStreamShader, quantTileShader } from './quantized.js';

describe('quantized shaders', () => {
  it('implement quantizedMatmul for every float storage', () => {
    expect(QUANTIZED_KERNELS.map((k) => k.spec.name)).toEqual(['quantizedMatmul']);
    expect(QUANTIZED_KERNELS[0]!.dtypes).toEqual(['f32', 'f16', 'bf16']);
  });

  it('read the codes as vec4<u32>, sum in workgroup memory without subgroups, and bind zero points (q4k, q5k, q6k: sub-block scales) and offsets only where the format has them', () => {
    for (const format of QUANT_FORMATS) {
      const layout = quantLayout(format, 1);
      const code = quantStreamShader({
        format,
        rows: 1,
        vecX: true,
        norm: false,
        subgroups: false,
        cols: 1,
        int8: false,
      }).code();
      expect(code).toContain('var<storage, read> packed: array<vec4<u32>>');
      expect(code).toContain('var<storage, read> x: array<vec4<f32>>');
      expect(code).not.toContain('subgroup');
      expect(code).toContain('workgroupBarrier()');
      const zeros = layout.zeroPoints || layout.subBlockScales;
      expect(code.includes('zeros')).toBe(zeros);
      expect(code.includes('offsets')).toBe(layout.offsets);
      expect(code.includes('sub_block_scale_min')).toBe(layout.subBlockScales && layout.bits !== 6);
      // q6k and the 5-bit formats: each lane reads its word's high pairs or bits, and its codes through byte masks.
      expect(code.includes('high_of(wRow0, chunks, next)')).toBe(layout.bits === 6 || layout.bits === 5);
      expect(code.includes('q6k_even')).toBe(layout.bits === 6);
      expect(code.includes('q5k_even')).toBe(layout.bits === 5);
      // x tiles and the lanes' sums share the 16 KiB of workgroup memory every device has.
      expect(code).toContain(`var<workgroup> xt: array<vec4<f32>, ${layout.bits === 8 ? 128 : 256}>`);
      expect(
        quantStreamShader({
          format,
          rows: QUANT_STREAM_MAX_ROWS,
          vecX: true,
          norm: false,
          subgroups: false,
          cols: 1,
          int8: false,
        }).code(),
      ).toContain(`var<workgroup> xt: array<vec4<f32>, ${layout.bits === 8 ? 512 : 1024}>`);
      expect(code).not.toContain('var<workgroup> red');
      // A folded norm: its weight bound after y (the eighth binding at most), x · weight staged.
      const normed = quantStreamShader({
        format,
        rows: 1,
        vecX: true,
        norm: true,
        subgroups: false,
        cols: 1,
        int8: false,
      }).code();
      expect(normed).toContain('var<storage, read> normWeight: array<f32>');
      expect(normed).toContain('q * g');
      // An aligned norm weight is read a quad at a time.
      const quads = quantStreamShader({
        format,
        rows: 1,
        vecX: true,
        norm: true,
        vecNorm: true,
        subgroups: false,
        cols: 1,
        int8: false,
      });
      expect(quads.code()).toContain('var<storage, read> normWeight: array<vec4<f32>>');
      expect(quads.code()).toContain('return normWeight[k / 4u];');
      expect(quads.key).not.toBe(
        quantStreamShader({ format, rows: 1, vecX: true, norm: true, subgroups: false, cols: 1, int8: false })
          .key,
      );
      expect(normed.match(/var<storage/g)!.length).toBeLessThanOrEqual(8);
      expect(code).not.toContain('normWeight');
      // With subgroups: each column's lanes summed by xor shuffles where subgroups of 32 run in
      // order, the workgroup tree otherwise (the same epilogue in both branches).
      const shuffled = quantStreamShader({
        format,
        rows: 2,
        vecX: true,
        norm: true,
        subgroups: true,
        cols: 1,
        int8: false,
      }).code();
      expect(shuffled).toContain('enable subgroups;');
      expect(shuffled).toContain('acc1_0 += subgroupShuffleXor(acc1_0, o);');
      expect(shuffled).toContain('var<workgroup> scattered: atomic<u32>');
      expect(shuffled.match(/if \(col0 < params.n\)/g)).toHaveLength(2);
      const tile = quantTileShader({ format }).code();
      expect(tile).toContain('var<workgroup> ws: array<vec4<f32>, 512>');
      expect(tile.includes('zeros')).toBe(zeros);
      expect(tile.includes('offsets')).toBe(layout.offsets);
      expect(tile.includes('sub_block(wRow, g, (k0 / 32u) & 7u)')).toBe(
        layout.subBlockScales && layout.bits === 4,
      );
      expect(tile.includes('q6k_scale(wRow, g, c * 2u + quarter / 2u)')).toBe(layout.bits === 6);
      expect(tile.includes('sub_block(wRow, g, c)')).toBe(layout.bits === 5 && layout.subBlockScales);
      // q5g32, q5g32a: a group's high word after the row's nibbles, in the stream and the tile.
      const q5g = layout.bits === 5 && !layout.subBlockScales;
      expect(code.includes('packed[row * (params.rowWords / 4u) + chunks + c / 4u]')).toBe(q5g);
      expect(tile.includes('packed[base + params.groups * 4u + g]')).toBe(q5g);
    }
  });

  it('compile one shader per format, row count and x layout: zero points, c and scale storage are parameters', () => {
    const keys = QUANT_FORMATS.flatMap((format) => [
      ...[1, QUANT_STREAM_MAX_ROWS].flatMap((rows) =>
        [true, false].flatMap((vecX) =>
          [false, true].flatMap((norm) =>
            [false, true].map(
              (subgroups) =>
                quantStreamShader({ format, rows, vecX, norm, subgroups, cols: 1, int8: false }).key,
            ),
          ),
        ),
      ),
      quantTileShader({ format }).key,
    ]);
    expect(new Set(keys).size).toBe(keys.length);
    expect(keys).toContain('quantized/stream/m1/v4/q4g32');
    expect(keys).toContain('quantized/stream/m4/v4/norm/subgroups/q4k');
    expect(keys).toContain('quantized/tile64x64x32/q8');
  });
});
