import { bytesPerElement, UnsupportedOnBackendError } from '@rayo/core';
import type { KernelEncoder, Operand } from './kernel.js';

// Operands whose leading dimension is one row count (a quantized weight's
// packed codes, scales, zero points and offsets; a product's x, c and y),
// bound in pieces of whole rows when one of them is larger than a storage
// binding. A piece must start at an aligned offset in every operand at once,
// so its row count is a multiple of the least common multiple of each
// operand's rows per aligned step.

/** Rows [start, start + count) of every operand of a split. */
export interface RowPiece {
  readonly start: number;
  readonly count: number;
}

/** An operand of a split by name (for errors); absent ones are skipped. */
export type RowOperands = Readonly<Record<string, Operand | undefined>>;

type Limits = Pick<KernelEncoder, 'maxBindingBytes' | 'limits'>;

const gcd = (a: number, b: number): number => (b === 0 ? a : gcd(b, a % b));
const lcm = (a: number, b: number): number => (a / gcd(a, b)) * b;

/** Bytes of one row of `operand` when it holds `rows` rows. */
function rowBytesOf(operand: Operand, rows: number): number {
  return (operand.size / rows) * bytesPerElement(operand.dtype);
}

/**
 * Pieces of whole rows of `rows`-row operands: one piece where each fits one
 * binding, else pieces that fit one binding in every operand and start at an
 * offset storage bindings accept in each. A row (or the fewest rows that
 * start aligned in every operand) larger than a binding is refused with a
 * `RayoError`, never truncated.
 */
export function rowPieces(
  encoder: Limits,
  kernel: string,
  rows: number,
  operands: RowOperands,
  /** Pieces' rows are a multiple of it too (but the last). */
  multiple = 1,
): RowPiece[] {
  const max = encoder.maxBindingBytes;
  const parts = Object.entries(operands).filter((e): e is [string, Operand] => e[1] !== undefined);
  const bytes = (o: Operand) => Math.ceil((o.size * bytesPerElement(o.dtype)) / 4) * 4;
  if (rows === 0 || parts.every(([, o]) => bytes(o) <= max)) return [{ start: 0, count: rows }];
  const align = encoder.limits.minStorageBufferOffsetAlignment;
  let unit = multiple;
  let widest: [string, number] = ['', 0];
  for (const [name, operand] of parts) {
    const rowBytes = rowBytesOf(operand, rows);
    if (rowBytes > widest[1]) widest = [name, rowBytes];
    if (rowBytes > max) {
      throw new UnsupportedOnBackendError('one row of the operand is larger than one storage binding', {
        operation: kernel,
        argument: name,
        expected: `rows of at most ${max} bytes (maxStorageBufferBindingSize), bound in pieces of whole rows`,
        actual: `${rowBytes} bytes per row`,
      });
    }
    unit = lcm(unit, align / gcd(align, rowBytes));
  }
  const [name, rowBytes] = widest;
  const perPiece = Math.floor(max / rowBytes / unit) * unit;
  if (perPiece === 0) {
    throw new UnsupportedOnBackendError(
      'the fewest whole rows that start aligned in every operand exceed one binding',
      {
        operation: kernel,
        argument: name,
        expected: `pieces of at most ${max} bytes (maxStorageBufferBindingSize) starting at multiples of ${align} bytes`,
        actual: `${unit} rows of ${rowBytes} bytes (${unit * rowBytes} bytes)`,
      },
    );
  }
  const pieces: RowPiece[] = [];
  for (let start = 0; start < rows; start += perPiece)
    pieces.push({ start, count: Math.min(perPiece, rows - start) });
  return pieces;
}

/** Rows `piece` of `operand`, which holds `rows` rows. */
export function rowsOf(operand: Operand, rows: number, piece: RowPiece): Operand {
  if (piece.start === 0 && piece.count === rows) return operand;
  const perRow = operand.size / rows;
  return {
    ...operand,
    offset: operand.offset + piece.start * rowBytesOf(operand, rows),
    size: piece.count * perRow,
    shape: [piece.count, ...operand.shape.slice(1)],
  };
}

/** Rows `piece` of every operand of a split (absent ones stay absent). */
export function rowsOfAll<T extends RowOperands>(operands: T, rows: number, piece: RowPiece): T {
  return Object.fromEntries(
    Object.entries(operands).map(([name, o]) => [name, o && rowsOf(o, rows, piece)]),
  ) as T;
}

/** One dispatch's share of a product y [M, N] = x [M, K] · Wᵀ (+ c): rows of x, c and y, and rows of W. */
export interface ProductPiece<W extends RowOperands> {
  readonly x: Operand;
  readonly c: Operand | undefined;
  /** y's rows of this piece, all N columns (the dispatch writes columns `columns`). */
  readonly y: Operand;
  /** The weights' rows `columns`. */
  readonly weights: readonly W[];
  /** The output columns (rows of the weights) of this piece. */
  readonly columns: RowPiece;
  /** Row stride of y and c: all of N. */
  readonly ldy: number;
}

/**
 * The pieces of a product whose weights (rows = output columns) or
 * activations (rows = rows of x) are larger than one binding: rows of x, c
 * and y in pieces, and within each the weights' rows in pieces (each
 * weight's operands in step), the dispatch writing its columns of y at a
 * column offset. One piece where everything fits.
 */
export function productPieces<W extends RowOperands>(
  encoder: Limits,
  kernel: string,
  ops: { x: Operand; c: Operand | undefined; y: Operand; weights: readonly W[] },
): ProductPiece<W>[] {
  const [m] = ops.x.shape as [number];
  const n = ops.y.shape[1]!;
  // Each weight's operands go by their own names (a pair's are `gatePacked`, `upPacked`, …).
  const named: RowOperands = Object.assign({}, ...ops.weights);
  const columns = rowPieces(encoder, kernel, n, named);
  const rowsM = rowPieces(encoder, kernel, m, { x: ops.x, c: ops.c, y: ops.y });
  return rowsM.flatMap((r) =>
    columns.map((col) => ({
      x: rowsOf(ops.x, m, r),
      c: ops.c && rowsOf(ops.c, m, r),
      y: rowsOf(ops.y, m, r),
      weights: ops.weights.map((w) => rowsOfAll(w, n, col)),
      columns: col,
      ldy: n,
    })),
  );
}
