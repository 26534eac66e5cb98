import { ShapeError } from './errors.js';

export type Shape = readonly number[];

export function formatShape(shape: Shape): string {
  return `[${shape.join(', ')}]`;
}

/** Number of elements; the empty shape is a scalar with one element. */
export function sizeOf(shape: Shape): number {
  let n = 1;
  for (const d of shape) n *= d;
  return n;
}

/** Row-major (C order) strides in elements. */
export function stridesOf(shape: Shape): number[] {
  const strides = new Array<number>(shape.length);
  let s = 1;
  for (let i = shape.length - 1; i >= 0; i--) {
    strides[i] = s;
    s *= shape[i]!;
  }
  return strides;
}

export function shapesEqual(a: Shape, b: Shape): boolean {
  return a.length === b.length && a.every((d, i) => d === b[i]);
}

export function isValidShape(shape: unknown): shape is Shape {
  return Array.isArray(shape) && shape.every((d) => Number.isInteger(d) && d >= 0);
}

/**
 * NumPy broadcasting: shapes are aligned on the right; each pair of dimensions
 * must be equal or one of them 1.
 */
export function broadcastShapes(
  a: Shape,
  b: Shape,
  context: { operation: string; argument: string },
): number[] {
  const rank = Math.max(a.length, b.length);
  const out = new Array<number>(rank);
  for (let i = 0; i < rank; i++) {
    const da = a[a.length - rank + i] ?? 1;
    const db = b[b.length - rank + i] ?? 1;
    if (da !== db && da !== 1 && db !== 1) {
      throw new ShapeError('shapes cannot be broadcast together', {
        ...context,
        expected: `a shape broadcastable with ${formatShape(a)}`,
        actual: formatShape(b),
      });
    }
    out[i] = da === 1 ? db : da;
  }
  return out;
}

/**
 * For each flat index of `outShape`, the flat index into an operand of `shape`
 * broadcast to it. Used by reference implementations.
 */
export function broadcastIndexMap(shape: Shape, outShape: Shape): Int32Array {
  const n = sizeOf(outShape);
  const map = new Int32Array(n);
  const rank = outShape.length;
  const inStrides = stridesOf(shape);
  // Stride 0 along broadcast (size-1 or missing) dimensions.
  const eff = outShape.map((_, i) => {
    const j = i - (rank - shape.length);
    return j < 0 || shape[j] === 1 ? 0 : inStrides[j]!;
  });
  const idx = new Array<number>(rank).fill(0);
  let src = 0;
  for (let flat = 0; flat < n; flat++) {
    map[flat] = src;
    for (let d = rank - 1; d >= 0; d--) {
      idx[d]!++;
      src += eff[d]!;
      if (idx[d]! < outShape[d]!) break;
      src -= eff[d]! * outShape[d]!;
      idx[d] = 0;
    }
  }
  return map;
}

/**
 * The shape a reshape of `from` to `to` gives: `to` with at most one −1, which
 * stands for the dimension that keeps the number of elements. Anything that
 * would change the number of elements is a ShapeError naming `api`.
 */
export function resolveReshape(from: Shape, to: Shape, api = 'reshape'): number[] {
  const size = sizeOf(from);
  const refuse = (): never => {
    throw new ShapeError('a reshape must keep the number of elements', {
      operation: api,
      argument: 'shape',
      expected: `a shape of ${size} elements (from ${formatShape(from)}), with at most one −1`,
      actual: Array.isArray(to) ? formatShape(to) : String(to),
    });
  };
  if (!Array.isArray(to) || !to.every((d) => Number.isInteger(d) && d >= -1)) refuse();
  const free = to.indexOf(-1);
  if (free !== to.lastIndexOf(-1)) refuse();
  if (free < 0) {
    if (sizeOf(to) !== size) refuse();
    return [...to];
  }
  const known = sizeOf(to.filter((_, i) => i !== free));
  // With a zero among the known dimensions the free one is ambiguous.
  if (known === 0 || size % known !== 0) refuse();
  const shape = [...to];
  shape[free] = size / known;
  return shape;
}
