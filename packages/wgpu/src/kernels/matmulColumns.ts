import { bytesPerElement, type MatmulLaunch, UnsupportedOnBackendError } from '@rayo/core';
import type { KernelEncoder, Operand } from '../kernel.js';
import { type RowPiece, rowPieces, rowsOf } from '../rowPieces.js';

// A product whose b, stored [N, K] (transB: a model's head, a linear
// layer's weight), is larger than one binding runs as one product per piece
// of b's whole rows, each computing its columns of y. With one row of a
// (decoding, a prompt's last row) the columns of y, c and z are contiguous
// and bound in place; with more rows they go through scratch [M, count]
// (c's copied in, y's and z's copied out a row at a time, on the device).
// Any other operand larger than a binding is refused by name.

const bytesOf = (o: Operand) => Math.ceil((o.size * bytesPerElement(o.dtype)) / 4) * 4;

function refuse(kernel: string, argument: string, operand: Operand, max: number, why: string): never {
  throw new UnsupportedOnBackendError(`operand larger than one storage binding: ${why}`, {
    operation: kernel,
    argument,
    expected: `<= ${max} bytes (maxStorageBufferBindingSize)`,
    actual: `${bytesOf(operand)} bytes`,
  });
}

/** Runs `encode` on `call` whole where every operand fits one binding, else on pieces of b's rows. */
export function encodeMatmulColumns(
  encoder: KernelEncoder,
  call: MatmulLaunch<Operand>,
  kernel: string,
  encode: (call: MatmulLaunch<Operand>) => void,
): void {
  const max = encoder.maxBindingBytes;
  const { a, b, c, y, z, bias, m, n } = call;
  const operands = { a, b, c, y, z, bias };
  const large = Object.entries(operands).filter((e): e is [string, Operand] => !!e[1] && bytesOf(e[1]) > max);
  if (large.length === 0) {
    encode(call);
    return;
  }
  const [name, operand] = large[0]!;
  if (call.batch !== 1 || !call.transB) refuse(kernel, name, operand, max, 'only b stored [N, K] is split');
  if (bytesOf(a) > max) refuse(kernel, 'a', a, max, 'the rows of a are not split');
  const outputs = { c, y, z };
  // More rows: the columns of c, y and z go through scratch, copied a row at a time in whole u32 words.
  const wordRows = Object.values(outputs).every((o) => !o || bytesPerElement(o.dtype) === 4 || n % 2 === 0);
  if (m > 1 && !wordRows) refuse(kernel, 'y', y, max, 'half columns of an odd N are not copied in pieces');
  // Pieces that fit b, bias and (in place, or as scratch) the columns of c, y and z; scratch copies
  // of half columns start at even columns.
  const pieces = rowPieces(encoder, kernel, n, { b, c, y, z, bias }, m > 1 ? 2 : 1);
  for (const piece of pieces) {
    const inPlace = (o: Operand | undefined) => o && columnsOf(o, piece);
    const slab = (o: Operand | undefined) => o && scratchOf(encoder, o, m, piece);
    const part =
      m === 1 ? { c: inPlace(c), y: inPlace(y)!, z: inPlace(z) } : { c: slab(c), y: slab(y)!, z: slab(z) };
    if (m > 1 && c) copyColumns(encoder, c, part.c!, { m, n }, piece, 'in');
    encode({
      ...call,
      ...part,
      b: rowsOf(b, n, piece),
      bias: bias && rowsOf(bias, n, piece),
      n: piece.count,
    });
    if (m > 1) {
      copyColumns(encoder, y, part.y, { m, n }, piece, 'out');
      if (z) copyColumns(encoder, z, part.z!, { m, n }, piece, 'out');
    }
  }
}

/** Columns `piece` of a [1, N] operand, in place. */
function columnsOf(o: Operand, piece: RowPiece): Operand {
  const bytes = bytesPerElement(o.dtype);
  return { ...o, offset: o.offset + piece.start * bytes, size: piece.count, shape: [1, piece.count] };
}

/** Scratch [M, count] in `o`'s dtype. */
function scratchOf(encoder: KernelEncoder, o: Operand, m: number, piece: RowPiece): Operand {
  const bytes = Math.max(16, Math.ceil((m * piece.count * bytesPerElement(o.dtype)) / 4) * 4);
  return {
    buffer: encoder.scratch(bytes),
    offset: 0,
    size: m * piece.count,
    shape: [m, piece.count],
    dtype: o.dtype,
  };
}

/** Copies columns `piece` of every row between `whole` [M, N] and `slab` [M, count]. */
function copyColumns(
  encoder: KernelEncoder,
  whole: Operand,
  slab: Operand,
  dims: { m: number; n: number },
  piece: RowPiece,
  direction: 'in' | 'out',
): void {
  const e = bytesPerElement(whole.dtype);
  const rowBytes = Math.ceil((piece.count * e) / 4) * 4;
  for (let r = 0; r < dims.m; r++) {
    const at = whole.offset + (r * dims.n + piece.start) * e;
    const slabAt = r * piece.count * e;
    if (direction === 'in') encoder.copy(whole.buffer, at, slab.buffer, slabAt, rowBytes);
    else encoder.copy(slab.buffer, slabAt, whole.buffer, at, rowBytes);
  }
}
