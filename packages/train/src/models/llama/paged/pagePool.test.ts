import { InvalidArgumentError, RayoError } from '@rayo/core';
import { describe, expect, it } from 'vitest';
import { PagePool } from './pagePool.js';

describe('PagePool', () => {
  it('grows a table a page at a time and gives every page back', () => {
    const pool = new PagePool(5, 4);
    const a = pool.table();
    const b = pool.table();
    expect(pool.grow(a, 1)).toBe(true);
    expect(a.pages).toHaveLength(1);
    expect(pool.grow(a, 4)).toBe(true);
    expect(a.pages).toHaveLength(1);
    expect(pool.grow(a, 5)).toBe(true);
    expect(a.pages).toHaveLength(2);
    expect(pool.grow(b, 9)).toBe(true);
    expect(b.pages).toHaveLength(3);
    // Five pages, each held once.
    expect(new Set([...a.pages, ...b.pages]).size).toBe(5);
    expect(pool.usage()).toEqual({ pageSize: 4, pages: 5, pagesInUse: 5, pagesFree: 0, rowsInUse: 14 });
    // Full: a growth that needs a page fails and takes nothing; one within the last page does not.
    expect(pool.canGrow(b, 13)).toBe(false);
    expect(pool.grow(b, 13)).toBe(false);
    expect(b.rows).toBe(9);
    expect(pool.grow(b, 12)).toBe(true);
    pool.clear(a);
    expect(a.pages).toHaveLength(0);
    expect(pool.usage().pagesFree).toBe(2);
    expect(pool.grow(b, 17)).toBe(true);
    pool.release(b);
    pool.release(b);
    pool.release(a);
    expect(pool.usage()).toEqual({ pageSize: 4, pages: 5, pagesInUse: 0, pagesFree: 5, rowsInUse: 0 });
  });

  it('never hands out a page twice over random growth and release', () => {
    const pool = new PagePool(7, 3);
    const live = new Set<ReturnType<PagePool['table']>>();
    let seed = 7;
    const random = () => {
      seed = (seed * 1103515245 + 12345) % 2 ** 31;
      return seed / 2 ** 31;
    };
    for (let i = 0; i < 300; i++) {
      const tables = [...live];
      const draw = random();
      if (tables.length === 0 || draw < 0.3) live.add(pool.table());
      else if (draw < 0.5) {
        const t = tables[Math.floor(random() * tables.length)]!;
        pool.release(t);
        live.delete(t);
      } else {
        const t = tables[Math.floor(random() * tables.length)]!;
        pool.grow(t, t.rows + 1 + Math.floor(random() * 4));
      }
      const held = [...live].flatMap((t) => t.pages);
      expect(new Set(held).size).toBe(held.length);
      expect(held.length + pool.freePages).toBe(7);
    }
  });

  it('refuses bad sizes, shrinking, and tables of another pool', () => {
    expect(() => new PagePool(0, 16)).toThrow(InvalidArgumentError);
    expect(() => new PagePool(4, 1.5)).toThrow(/pageSize/);
    const pool = new PagePool(4, 2);
    const t = pool.table();
    pool.grow(t, 3);
    expect(() => pool.grow(t, 2)).toThrow(/expected an integer >= 3/);
    const other = new PagePool(4, 2).table();
    expect(() => pool.grow(other, 1)).toThrow(RayoError);
    pool.release(t);
    expect(() => pool.grow(t, 4)).toThrow(/a released table/);
  });
});
