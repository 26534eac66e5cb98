import { InvalidArgumentError } from '@rayo/core';
import { describe, expect, it } from 'vitest';
import {
  fragmentElement,
  fragmentRegisters,
  MMA_SHAPES,
  type MmaOperand,
  type MmaShape,
} from './mmaFragments.js';

const OPERANDS: readonly MmaOperand[] = ['a', 'b', 'c'];

describe('mma fragment layouts', () => {
  for (const shape of Object.keys(MMA_SHAPES) as MmaShape[]) {
    const { m, n, k } = MMA_SHAPES[shape];
    const dims: Record<MmaOperand, [number, number]> = { a: [m, k], b: [k, n], c: [m, n] };
    for (const operand of OPERANDS) {
      it(`${shape} ${operand}: the warp's elements cover the ${dims[operand].join('×')} tile exactly once`, () => {
        const [rows, cols] = dims[operand];
        const seen = new Map<string, string>();
        const elements = MMA_SHAPES[shape][operand].length;
        for (let lane = 0; lane < 32; lane++) {
          for (let e = 0; e < elements; e++) {
            const { row, col } = fragmentElement(shape, operand, lane, e);
            expect(row).toBeGreaterThanOrEqual(0);
            expect(row).toBeLessThan(rows);
            expect(col).toBeGreaterThanOrEqual(0);
            expect(col).toBeLessThan(cols);
            const key = `${row},${col}`;
            expect(seen.get(key), `${key} held twice`).toBeUndefined();
            seen.set(key, `${lane}/${e}`);
          }
        }
        expect(seen.size).toBe(rows * cols);
      });
    }
  }

  it('places elements as the PTX ISA figures do', () => {
    // Lane 5: groupID 1, threadInGroup 1.
    expect(fragmentElement('m16n8k16', 'a', 5, 0)).toEqual({ row: 1, col: 2 });
    expect(fragmentElement('m16n8k16', 'a', 5, 3)).toEqual({ row: 9, col: 3 });
    expect(fragmentElement('m16n8k16', 'a', 5, 4)).toEqual({ row: 1, col: 10 });
    expect(fragmentElement('m16n8k16', 'a', 5, 7)).toEqual({ row: 9, col: 11 });
    expect(fragmentElement('m16n8k16', 'b', 5, 1)).toEqual({ row: 3, col: 1 });
    expect(fragmentElement('m16n8k16', 'b', 5, 2)).toEqual({ row: 10, col: 1 });
    expect(fragmentElement('m16n8k16', 'c', 5, 2)).toEqual({ row: 9, col: 2 });
    expect(fragmentElement('m16n8k8', 'a', 5, 1)).toEqual({ row: 9, col: 1 });
    expect(fragmentElement('m16n8k8', 'a', 5, 2)).toEqual({ row: 1, col: 5 });
    expect(fragmentElement('m16n8k8', 'b', 5, 1)).toEqual({ row: 5, col: 1 });
  });

  it('counts the registers of each operand', () => {
    expect([fragmentRegisters('m16n8k16', 'a'), fragmentRegisters('m16n8k16', 'b')]).toEqual([4, 2]);
    expect([fragmentRegisters('m16n8k8', 'a'), fragmentRegisters('m16n8k8', 'b')]).toEqual([4, 2]);
    expect(fragmentRegisters('m16n8k16', 'c')).toBe(4);
  });

  it('rejects lanes and elements outside the fragment', () => {
    expect(() => fragmentElement('m16n8k16', 'a', 32, 0)).toThrow(InvalidArgumentError);
    expect(() => fragmentElement('m16n8k8', 'b', 0, 2)).toThrow(
      'fragmentElement: no such fragment element (expected a lane in 0 .. 31 and an element of m16n8k8 operand b, got lane number 0, element number 2)',
    );
  });
});
