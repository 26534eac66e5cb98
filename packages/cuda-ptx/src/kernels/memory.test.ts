import { itAssemblesForBothTargets } from '@rayo/cuda-testkit';
import { describe, expect, it } from 'vitest';
import { ptxasTestGate } from '../ptx/ptxas.js';
import { fillModule, TILE, transposeModule, transposePlan, wordOf } from './memory.js';

describe('memory kernels', () => {
  it('fills with the bit pattern of the value in each dtype', () => {
    expect(wordOf(-1.5, 'f32')).toBe(0xbfc00000);
    expect(wordOf(Number.NEGATIVE_INFINITY, 'f32')).toBe(0xff800000);
    expect(wordOf(0.1, 'f32')).toBe(0x3dcccccd);
    expect(wordOf(-(2 ** 31), 'i32')).toBe(0x80000000);
    expect(wordOf(-7, 'i32')).toBe(0xfffffff9);
    expect(wordOf(2 ** 32 - 1, 'u32')).toBe(0xffffffff);
  });

  it('plans transposes as batches of tiles', () => {
    expect(transposePlan([317, 331])).toEqual({
      rows: 317,
      cols: 331,
      tilesC: 11,
      tilesPerMatrix: 110,
      tiles: 110,
    });
    expect(transposePlan([2, 3, 65, 17])).toEqual({
      rows: 65,
      cols: 17,
      tilesC: 1,
      tilesPerMatrix: 3,
      tiles: 18,
    });
    expect(transposePlan([TILE, TILE]).tiles).toBe(1);
  });

  it('declares the tile in shared memory, padded against bank conflicts, with barriers', () => {
    const text = transposeModule().emit();
    expect(text).toContain(`.shared .align 4 .u32 tile[${TILE * (TILE + 1)}];`);
    expect(text.match(/bar\.sync 0;/g)).toHaveLength(2);
    expect(text).toContain('.reqntid 32, 8, 1');
  });
});

const gate = ptxasTestGate();

describe.skipIf(gate.skip)(`memory PTX assembles with ptxas (${gate.reason})`, () => {
  itAssemblesForBothTargets('fill and transpose', [
    ['fill', fillModule],
    ['transpose', transposeModule],
  ]);
});
