import { InvalidArgumentError, RayoError } from '@rayo/core';
import { checkIntegerAtLeast } from '../../../integerOption.js';

/** Pages of a pool in use and free, and the rows they hold. */
export interface PagePoolUsage {
  readonly pageSize: number;
  readonly pages: number;
  readonly pagesInUse: number;
  readonly pagesFree: number;
  /** Rows the sequences have cached (at most pagesInUse · pageSize). */
  readonly rowsInUse: number;
}

/**
 * The pages one sequence holds, in order: row r of the sequence is row
 * r mod pageSize of page `pages[r / pageSize]`. `rows` is how many rows it
 * has reserved (cached or about to be written).
 */
export class BlockTable {
  readonly #pages: number[] = [];
  #rows = 0;
  #released = false;

  get pages(): readonly number[] {
    return this.#pages;
  }

  get rows(): number {
    return this.#rows;
  }

  get released(): boolean {
    return this.#released;
  }

  /** @internal the pool's bookkeeping. */
  static hold(table: BlockTable, pages: readonly number[], rows: number): void {
    table.#pages.push(...pages);
    table.#rows = rows;
  }

  /** @internal the pool's bookkeeping: the pages it gives back. */
  static drop(table: BlockTable, release: boolean): number[] {
    const pages = table.#pages.splice(0);
    table.#rows = 0;
    if (release) table.#released = true;
    return pages;
  }
}

/**
 * A fixed number of fixed-size pages of KV cache rows and their free list:
 * a sequence's block table grows a page at a time as its rows cross a page
 * boundary, and its pages go back to the list when it is released (it
 * ended, was cancelled, or was preempted). Host bookkeeping only: the
 * device tensors the page numbers index are the paged cache's.
 */
export class PagePool {
  readonly pageSize: number;
  readonly pages: number;
  /** Free page numbers; the last is handed out first, so recently freed pages are reused. */
  readonly #free: number[];
  readonly #tables = new Set<BlockTable>();

  constructor(pages: number, pageSize: number) {
    checkIntegerAtLeast('PagePool', 'pages', pages, 1);
    checkIntegerAtLeast('PagePool', 'pageSize', pageSize, 1);
    this.pages = pages;
    this.pageSize = pageSize;
    this.#free = Array.from({ length: pages }, (_, i) => pages - 1 - i);
  }

  /** Pages that `rows` rows take. */
  pagesFor(rows: number): number {
    return Math.ceil(rows / this.pageSize);
  }

  get freePages(): number {
    return this.#free.length;
  }

  /** A new, empty block table of this pool. */
  table(): BlockTable {
    const table = new BlockTable();
    this.#tables.add(table);
    return table;
  }

  /** Whether `table` can grow to `rows` rows with the pages free now. */
  canGrow(table: BlockTable, rows: number): boolean {
    return this.pagesFor(rows) - table.pages.length <= this.#free.length;
  }

  /**
   * Reserves rows up to `rows` for `table`, taking the pages that needs;
   * false (and nothing taken) when too few pages are free.
   */
  grow(table: BlockTable, rows: number): boolean {
    this.#check(table, 'grow');
    if (!Number.isInteger(rows) || rows < table.rows) {
      throw new InvalidArgumentError('a block table only grows', {
        operation: 'PagePool.grow',
        argument: 'rows',
        expected: `an integer >= ${table.rows} (the rows it holds)`,
        actual: String(rows),
      });
    }
    const more = this.pagesFor(rows) - table.pages.length;
    if (more > this.#free.length) return false;
    BlockTable.hold(table, this.#free.splice(this.#free.length - more, more).reverse(), rows);
    return true;
  }

  /** Gives every page of `table` back and empties it; the table stays usable (a preempted sequence regrows it). */
  clear(table: BlockTable): void {
    this.#check(table, 'clear');
    this.#giveBack(BlockTable.drop(table, false));
  }

  /** Gives every page of `table` back, for good. Releasing a released table does nothing. */
  release(table: BlockTable): void {
    if (table.released) return;
    this.#check(table, 'release');
    this.#giveBack(BlockTable.drop(table, true));
    this.#tables.delete(table);
  }

  usage(): PagePoolUsage {
    let rowsInUse = 0;
    for (const table of this.#tables) rowsInUse += table.rows;
    return {
      pageSize: this.pageSize,
      pages: this.pages,
      pagesInUse: this.pages - this.#free.length,
      pagesFree: this.#free.length,
      rowsInUse,
    };
  }

  #giveBack(pages: number[]): void {
    for (let i = pages.length - 1; i >= 0; i--) this.#free.push(pages[i]!);
  }

  #check(table: BlockTable, call: string): void {
    if (!this.#tables.has(table)) {
      throw new RayoError('the block table is not one of this pool', {
        operation: `PagePool.${call}`,
        argument: 'table',
        expected: 'a table this pool made and has not released',
        actual: table.released ? 'a released table' : "another pool's table",
      });
    }
  }
}
