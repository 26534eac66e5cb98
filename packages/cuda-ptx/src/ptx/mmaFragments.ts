/**
 * Where each element of a `mma.sync` fragment lives: for every register of
 * the A, B and C/D operands of a shape, the row and column of the tile it
 * holds as an affine function of the lane's `groupID` (lane >> 2) and
 * `threadInGroup` (lane & 3), as the PTX ISA's fragment layout figures give
 * them. Kernels use these to load fragments (or to check an ldmatrix-based
 * load), the interpreter to gather and scatter them.
 */
import { describeValue, misuse } from './errors.js';

/** The tensor-core shapes the builder emits: f16/bf16 inputs with k = 16, tf32 inputs with k = 8. */
export type MmaShape = 'm16n8k16' | 'm16n8k8';
/** The input element type of A and B; the accumulator is always f32. */
export type MmaInputType = 'f16' | 'bf16' | 'tf32';
export type MmaOperand = 'a' | 'b' | 'c';

/** `row = rowPerGroup · groupID + rowPerThread · threadInGroup + row`, and likewise for the column. */
export interface FragmentCoordinate {
  readonly rowPerGroup: number;
  readonly rowPerThread: number;
  readonly row: number;
  readonly colPerGroup: number;
  readonly colPerThread: number;
  readonly col: number;
}

export interface MmaShapeInfo {
  readonly m: number;
  readonly n: number;
  readonly k: number;
  /** The input types this shape takes (f32 accumulation). */
  readonly inputs: readonly MmaInputType[];
  /** Elements of A and B per 32-bit register: two halves, or one tf32. */
  readonly elementsPerRegister: number;
  /** Each operand's elements, in register order (register i holds elements i·epr … i·epr + epr − 1). */
  readonly a: readonly FragmentCoordinate[];
  readonly b: readonly FragmentCoordinate[];
  readonly c: readonly FragmentCoordinate[];
}

/** groupID · g + threadInGroup · t + base, for rows and columns. */
function at(
  row: readonly [g: number, t: number, base: number],
  col: readonly [g: number, t: number, base: number],
): FragmentCoordinate {
  return {
    rowPerGroup: row[0],
    rowPerThread: row[1],
    row: row[2],
    colPerGroup: col[0],
    colPerThread: col[1],
    col: col[2],
  };
}

/** C and D of both shapes: c0, c1 in row groupID, c2, c3 eight rows down; columns 2·threadInGroup + (i & 1). */
const ACCUMULATOR_16x8 = [
  at([1, 0, 0], [0, 2, 0]),
  at([1, 0, 0], [0, 2, 1]),
  at([1, 0, 8], [0, 2, 0]),
  at([1, 0, 8], [0, 2, 1]),
];

export const MMA_SHAPES: Readonly<Record<MmaShape, MmaShapeInfo>> = {
  m16n8k16: {
    m: 16,
    n: 8,
    k: 16,
    inputs: ['f16', 'bf16'],
    elementsPerRegister: 2,
    // A (row-major 16×16): registers {a0,a1} (g, 2t..), {a2,a3} (g+8, 2t..), {a4,a5} (g, 2t+8..), {a6,a7} (g+8, 2t+8..).
    a: [0, 8].flatMap((colBase) =>
      [0, 8].flatMap((rowBase) => [0, 1].map((i) => at([1, 0, rowBase], [0, 2, colBase + i]))),
    ),
    // B (16×8, "col"): {b0,b1} rows 2t, 2t+1 and {b2,b3} eight rows down, column groupID.
    b: [0, 8].flatMap((rowBase) => [0, 1].map((i) => at([0, 2, rowBase + i], [1, 0, 0]))),
    c: ACCUMULATOR_16x8,
  },
  m16n8k8: {
    m: 16,
    n: 8,
    k: 8,
    inputs: ['tf32'],
    elementsPerRegister: 1,
    // A (16×8): a0 (g, t), a1 (g+8, t), a2 (g, t+4), a3 (g+8, t+4).
    a: [
      at([1, 0, 0], [0, 1, 0]),
      at([1, 0, 8], [0, 1, 0]),
      at([1, 0, 0], [0, 1, 4]),
      at([1, 0, 8], [0, 1, 4]),
    ],
    // B (8×8): b0 (t, g), b1 (t+4, g).
    b: [at([0, 1, 0], [1, 0, 0]), at([0, 1, 4], [1, 0, 0])],
    c: ACCUMULATOR_16x8,
  },
};

/** Registers per lane of each operand: A and B are `.b32` registers, C and D `.f32`. */
export function fragmentRegisters(shape: MmaShape, operand: MmaOperand): number {
  const info = MMA_SHAPES[shape];
  return operand === 'c' ? info.c.length : info[operand].length / info.elementsPerRegister;
}

/** The tile row and column of element `element` of `operand` in lane `lane`. */
export function fragmentElement(
  shape: MmaShape,
  operand: MmaOperand,
  lane: number,
  element: number,
): { row: number; col: number } {
  const e = MMA_SHAPES[shape]?.[operand]?.[element];
  if (e === undefined || !Number.isInteger(lane) || lane < 0 || lane > 31) {
    throw misuse('fragmentElement', 'no such fragment element', {
      expected: `a lane in 0 .. 31 and an element of ${shape} operand ${operand}`,
      actual: `lane ${describeValue(lane)}, element ${describeValue(element)}`,
    });
  }
  const group = lane >>> 2;
  const thread = lane & 3;
  return {
    row: e.rowPerGroup * group + e.rowPerThread * thread + e.row,
    col: e.colPerGroup * group + e.colPerThread * thread + e.col,
  };
}
