import { describe, expect, it } from 'vitest';
import { HALF_TILE_MID, halfGemmShader } from './matmulHalf.js';
import { TILE_MID, tileShader } from './matmulTile.js';
import { doubleBufferedKLoop, type TileStage } from './matmulWgsl.js';

/** A stage whose WGSL names what it was asked for. */
const stage = (name: string, size: number): TileStage => ({
  load: (k0) => `load_${name}(${k0});`,
  store: (buffer) => `store_${name}(${buffer});`,
  size,
});

describe('the double-buffered K loop of the tiled products', () => {
  const loop = doubleBufferedKLoop(stage('a', 24), stage('b', 40), 16, 'multiply(ca, cb);');
  const at = (text: string) => {
    const i = loop.indexOf(text);
    expect(i, text).toBeGreaterThanOrEqual(0);
    return i;
  };

  it('stages the first slice into buffer 0, then per step prefetches, multiplies and stores into the other buffer', () => {
    const order = [
      'load_a(kBegin);',
      'load_b(kBegin);',
      'store_a(0u);',
      'store_b(0u);',
      'workgroupBarrier();',
      'let steps = (kEnd - kBegin + 15u) / 16u;',
      'let k0 = kBegin + (s + 1u) * 16u;',
      'load_a(k0);',
      'load_b(k0);',
      'let ca = cur * 24u;',
      'let cb = cur * 40u;',
      'multiply(ca, cb);',
      'let na = 24u - ca;',
      'let nb = 40u - cb;',
      'store_a(na);',
      'store_b(nb);',
    ].map(at);
    expect(order).toEqual([...order].sort((x, y) => x - y));
    // One barrier before the loop and one per step, after the stores.
    expect(loop.match(/workgroupBarrier\(\);/g)).toHaveLength(2);
    expect(loop.lastIndexOf('workgroupBarrier();')).toBeGreaterThan(at('store_b(nb);'));
  });

  it('is the loop of both the f32 tiles and the half subgroup-matrix tiles', () => {
    const out = { vec: true, c: false };
    const f32 = tileShader(
      { tile: TILE_MID, swap: false, transA: false, transB: true, vecA: true, vecB: true, b: 'f32', out },
      'matmul',
    ).code();
    expect(f32).toContain(`let k0 = kBegin + (s + 1u) * ${TILE_MID.bk}u;`);
    for (const compute of ['subgroup-matrix', 'emulated'] as const) {
      const half = halfGemmShader(
        {
          compute,
          shape: { m: 16, n: 16, k: 16, lanes: 32 },
          tile: HALF_TILE_MID,
          transA: false,
          transB: true,
          vecA: true,
          vecB: true,
          out,
        },
        'matmul',
      ).code();
      expect(half).toContain(`let k0 = kBegin + (s + 1u) * ${HALF_TILE_MID.bk}u;`);
      // The stages read the slice at k0, in the prologue at kBegin.
      expect(half).toContain('let gc = k0 + a_col0;');
      expect(half).toContain('let gc = kBegin + a_col0;');
    }
  });
});
