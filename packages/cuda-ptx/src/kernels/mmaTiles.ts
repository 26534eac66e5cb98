import type { CmpOp, Vec2, Vec4 } from '../ptx/instructionTypes.js';
import type { KernelBuilder } from '../ptx/kernel.js';
import type { MmaInputType } from '../ptx/mmaFragments.js';
import { type Address, addr, type F32, type R32 } from '../ptx/operands.js';

// Tiles of rows of headDim halves in shared memory, as the tensor-core
// attention kernels read them through ldmatrix x4 for m16n8k16 products:
// each row is headDim · 2 bytes, its 16-byte chunks XORed with row & 7, so
// that the 8 rows of an 8×8 matrix fall in 8 bank groups.

/** Byte offset of 16-byte chunk `chunk` of row `row`. */
export function swizzled(k: KernelBuilder, rowBytes: number, row: R32, chunk: R32): R32 {
  const c = k.xor('b32', k.reg('u32'), chunk, k.and('b32', k.reg('u32'), row, 7));
  return k.madLo('u32', k.reg('u32'), row, rowBytes, k.shl('b32', k.reg('u32'), c, 4));
}

/**
 * The row and chunk half a lane addresses in an x4 load. A lane gives the
 * address of row `mj` (lane & 7) of matrix lane >> 3, whose bits are
 * `lowBit` and `highBit`: an A operand (16 rows × 16 k) takes matrices
 * (rows 0-7, k 0-7), (8-15, 0-7), (0-7, 8-15), (8-15, 8-15), rows
 * mj + 8·lowBit and chunk half highBit; a B operand stored as n rows of k
 * (16 n × 16 k: b of two n8 products) takes rows mj + 8·highBit and chunk
 * half lowBit; a B operand stored as k rows of n (through .trans) takes
 * rows mj + 8·lowBit and chunk half highBit.
 */
export function ldmatrixRoles(k: KernelBuilder, lane: R32) {
  const mi = k.shr('u32', k.reg('u32'), lane, 3);
  const mj = k.and('b32', k.reg('u32'), lane, 7);
  const lowBit = k.and('b32', k.reg('u32'), mi, 1);
  const highBit = k.shr('u32', k.reg('u32'), mi, 1);
  return { mj, lowBit, highBit };
}

/** Shared addresses of the x4 fragments of a tile of `rowBytes` rows, `kSteps` 16-wide k steps across. */
export class TileFragments {
  constructor(
    private readonly k: KernelBuilder,
    private readonly rowBytes: number,
    private readonly kSteps: number,
  ) {}

  /**
   * Addresses of a lane's x4 loads for k step kk of the first 16 rows: row & 7
   * (the swizzle) is the same 16 rows down, and chunk 2kk + 8 is chunk 2kk's
   * swizzled one plus 8, so 4 registers and immediate offsets (16 rows ·
   * rowBytes, 128 bytes) cover the tile.
   */
  bases(tileBase: R32, row: R32, chunkHalf: R32): R32[] {
    const k = this.k;
    const swz = k.xor('b32', k.reg('u32'), chunkHalf, k.and('b32', k.reg('u32'), row, 7));
    const rowAt = k.madLo('u32', k.reg('u32'), row, this.rowBytes, tileBase);
    return Array.from({ length: Math.min(this.kSteps, 4) }, (_, kk) =>
      k.madLo('u32', k.reg('u32'), kk === 0 ? swz : k.xor('b32', k.reg('u32'), swz, 2 * kk), 16, rowAt),
    );
  }

  /** The address of the fragment of rows 16·rowBlock … and k step kk. */
  at(bases: readonly R32[], rowBlock: number, kk: number): Address {
    return addr(bases[kk & 3]!, 16 * rowBlock * this.rowBytes + 128 * (kk >> 2));
  }
}

/** Where a product reads its B operand: the x4 fragment of n block `nb` and k step `kk`. */
export interface ProductB {
  readonly at: (nb: number, kk: number) => Address;
  /** B is stored as k rows of n (read through .trans). */
  readonly trans?: boolean;
}

/**
 * acc[2nb], acc[2nb + 1] (two n8 tiles) += A(kk) · B(nb, kk) over `nBlocks`
 * 16-wide n blocks and `kSteps` k steps, k innermost unless `kOuter`.
 */
export function mmaProduct(
  k: KernelBuilder,
  type: MmaInputType,
  acc: readonly Vec4<F32>[],
  a: (kk: number) => Vec4<R32>,
  b: ProductB,
  steps: { nBlocks: number; kSteps: number; kOuter?: boolean },
): void {
  const one = (nb: number, kk: number) => {
    const f = k.ldmatrix(4, k.regs('u32', 4), b.at(nb, kk), b.trans ? { trans: true } : {});
    const ak = a(kk);
    k.mmaSync('m16n8k16', type, acc[2 * nb]!, ak, [f[0], f[1]] as Vec2<R32>, acc[2 * nb]!);
    k.mmaSync('m16n8k16', type, acc[2 * nb + 1]!, ak, [f[2], f[3]] as Vec2<R32>, acc[2 * nb + 1]!);
  };
  if (steps.kOuter) {
    for (let kk = 0; kk < steps.kSteps; kk++) for (let nb = 0; nb < steps.nBlocks; nb++) one(nb, kk);
  } else {
    for (let nb = 0; nb < steps.nBlocks; nb++) for (let kk = 0; kk < steps.kSteps; kk++) one(nb, kk);
  }
}

/** The accumulators of n8 tiles 2kk and 2kk + 1, packed to halves: exactly A's fragment for k 16kk … 16kk + 15. */
export function accumulatorsAsA(
  k: KernelBuilder,
  type: 'f16' | 'bf16',
  acc: readonly Vec4<F32>[],
  kk: number,
) {
  return [0, 1, 2, 3].map((w) => {
    const r = acc[2 * kk + (w >> 1)]!;
    const e = 2 * (w & 1);
    return k.cvtPack(type, k.reg('u32'), r[e]!, r[e + 1]!);
  }) as unknown as Vec4<R32>;
}

/**
 * One step of the online softmax over score tiles `s` (n8 accumulators) of
 * the lane's two rows (elements 2h, 2h + 1 of every tile are row h's): the
 * running maxima `m` (unscaled: scores are scaled inside the exponent) and
 * sums `l` are updated, `s` becomes exp2(scaleLog2 · (s − m)), and the
 * factor each row's earlier sums and outputs are rescaled by is returned.
 * A row's scores lie on the 4 lanes of a quad: two shuffles give its max.
 */
export function onlineSoftmax(
  k: KernelBuilder,
  s: readonly Vec4<F32>[],
  m: readonly F32[],
  l: readonly F32[],
  scaleLog2: F32,
): F32[] {
  return m.map((mRow, h) => {
    let top: F32 = mRow;
    const scaledMax = k.reg('f32');
    let local: F32 | undefined;
    for (const r of s) {
      const pair = k.max('f32', k.reg('f32'), r[2 * h]!, r[2 * h + 1]!);
      local = local ? k.max('f32', local, local, pair) : pair;
    }
    for (const offset of [1, 2])
      k.max('f32', local!, local!, k.shflSync('bfly', k.reg('f32'), local!, offset));
    top = k.max('f32', k.reg('f32'), top, local!);
    k.mul('f32', scaledMax, top, scaleLog2, { rnd: 'rn' });
    const negMax = k.neg('f32', k.reg('f32'), scaledMax);
    const factor = k.ex2(k.reg('f32'), k.fma('f32', k.reg('f32'), mRow, scaleLog2, negMax), { ftz: true });
    k.mov('f32', mRow, top);
    k.mul('f32', l[h]!, l[h]!, factor, { rnd: 'rn' });
    for (const r of s) {
      for (const e of [2 * h, 2 * h + 1]) {
        k.ex2(r[e]!, k.fma('f32', k.reg('f32'), r[e]!, scaleLog2, negMax), { ftz: true });
        k.add('f32', l[h]!, l[h]!, r[e]!, { rnd: 'rn' });
      }
    }
    return factor;
  });
}

/**
 * Sets to −inf the elements of n8 tiles `acc` whose column fails
 * `column cmp bound[h]` for the lane's row h (elements 2h, 2h + 1 are row
 * h's); `col0` is the column of the lane's element 0 of tile 0.
 */
export function maskColumns(
  k: KernelBuilder,
  acc: readonly Vec4<F32>[],
  col0: R32,
  cmp: CmpOp,
  bound: readonly R32[],
): void {
  acc.forEach((r, j) => {
    r.forEach((x, e) => {
      const col = k.add('u32', k.reg('u32'), col0, 8 * j + (e & 1));
      const valid = k.setp(cmp, 'u32', k.reg('pred'), col, bound[e >> 1]!);
      k.selp('f32', x, x, Number.NEGATIVE_INFINITY, valid);
    });
  });
}
