import { fragmentElement, type SharedSwizzle, swizzleOffset, wgmmaAccumulatorElement } from '@rayo/cuda-ptx';
import { bf16ToNumber, bitsToF32, f16ToNumber, f32ToBits } from './floatBits.js';

/**
 * What the PTX interpreter computes for `wgmma.mma_async` with f32
 * accumulators, its operands K-major or (transposed) MN-major. With A and B read through
 * descriptors (or A from the warp's own registers), each warp of the
 * warpgroup computes its own 16 rows of D, so the instruction is a meeting of
 * one warp, and the asynchrony is modelled as none (fence, commit and wait
 * change nothing).
 *
 * A descriptor names a K-major tile: rows (M or N) in 8-row groups `sbo`
 * bytes apart; within a group, unswizzled, 8×16-byte core matrices with the
 * next 8 elements of K `lbo` bytes on; swizzled, rows of the swizzle's span
 * whose 16-byte chunks are XORed by their 128-byte line (swizzle.ts), the
 * pattern anchored at 1024-byte boundaries of the shared window.
 */

export interface WgmmaDescriptor {
  readonly start: number;
  readonly leadingByteOffset: number;
  readonly strideByteOffset: number;
  readonly baseOffset: number;
  readonly swizzle: SharedSwizzle;
}

const SWIZZLE_OF_CODE: readonly SharedSwizzle[] = ['none', '128B', '64B', '32B'];

/** The fields of a 64-bit matrix descriptor given as its low and high words. */
export function decodeWgmmaDescriptor(lo: number, hi: number): WgmmaDescriptor {
  return {
    start: (lo & 0x3fff) << 4,
    leadingByteOffset: ((lo >>> 16) & 0x3fff) << 4,
    strideByteOffset: (hi & 0x3fff) << 4,
    baseOffset: (hi >>> 17) & 7,
    swizzle: SWIZZLE_OF_CODE[hi >>> 30]!,
  };
}

/**
 * The shared-window byte address of element (row, k) of a tile of 2-byte
 * elements: K-major (rows of K), or MN-major (`transposed`: rows of M or N,
 * one row per k) as the PTX ISA's canonical layouts say. MN-major and
 * swizzled, a row holds span/2 elements of MN, 8 rows (k) make a
 * span × 8 atom, atoms along MN are LBO apart and along K (8 k each) SBO
 * apart; MN-major and unswizzled, core matrices of 8 MN × 8 k (8 rows of
 * 16 bytes, one per k) are SBO apart along MN and LBO apart along K.
 */
export function descriptorElementAddress(
  d: WgmmaDescriptor,
  row: number,
  k: number,
  transposed = false,
  elementBytes = 2,
): number {
  if (transposed) {
    if (d.swizzle === 'none') {
      return (
        d.start +
        (row >>> 3) * d.strideByteOffset +
        (k >>> 3) * d.leadingByteOffset +
        (k & 7) * 16 +
        (row & 7) * 2
      );
    }
    const span = { '32B': 32, '64B': 64, '128B': 128 }[d.swizzle];
    const perRow = span / 2;
    const at =
      d.start +
      Math.floor(row / perRow) * d.leadingByteOffset +
      (k >>> 3) * d.strideByteOffset +
      (k & 7) * span +
      (row % perRow) * 2;
    return swizzleOffset(d.swizzle, at);
  }
  const group = d.start + (row >>> 3) * d.strideByteOffset;
  // A core matrix row is 16 bytes: 8 halves or 4 tf32.
  const perChunk = 16 / elementBytes;
  if (d.swizzle === 'none') {
    return (
      group + Math.floor(k / perChunk) * d.leadingByteOffset + (row & 7) * 16 + (k % perChunk) * elementBytes
    );
  }
  const span = { '32B': 32, '64B': 64, '128B': 128 }[d.swizzle];
  return swizzleOffset(d.swizzle, group + (row & 7) * span + k * elementBytes);
}

export interface WgmmaWarpOperands {
  /** Input element type: 2 bytes (16 of K), or tf32 in 4 (8 of K, K-major, its low 13 bits ignored). */
  readonly type: 'bf16' | 'f16' | 'tf32';
  readonly n: number;
  /** This warp's index in its warpgroup (0–3): it owns rows 16w … 16w + 15 of D. */
  readonly warp: number;
  /** A's descriptor, or each lane's 4 A registers (lane-major). */
  readonly a: WgmmaDescriptor | Uint32Array;
  readonly b: WgmmaDescriptor;
  /** Each lane's n/2 accumulators (lane-major), read when `accumulate`. */
  readonly d: Uint32Array;
  readonly accumulate: boolean;
  readonly negateA: boolean;
  readonly negateB: boolean;
  /** `imm-trans-a` / `imm-trans-b`: the descriptor's tile is MN-major. */
  readonly transposeA?: boolean;
  readonly transposeB?: boolean;
  /** The 16-bit element at a shared-window byte address. */
  readonly half: (address: number) => number;
  /** The 32-bit word at a shared-window byte address (tf32). */
  readonly word?: (address: number) => number;
}

function fail(): never {
  throw new Error('tf32 wgmma needs a word reader');
}

/** The warp's new accumulators: D (its 16 rows) = A·B + (accumulate ? D : 0), lane-major. */
export function wgmmaWarp(o: WgmmaWarpOperands): Uint32Array {
  const tf32 = o.type === 'tf32';
  const K = tf32 ? 8 : 16;
  const bytes = tf32 ? 4 : 2;
  const value = o.type === 'bf16' ? bf16ToNumber : f16ToNumber;
  const read = (address: number) =>
    tf32 ? bitsToF32(((o.word ?? fail)(address) & 0xffffe000) >>> 0) : value(o.half(address));
  const perLane = o.n / 2;
  // This warp's 16 rows of A (16 × K) and all of B, as B[col][k].
  const A = new Float64Array(16 * 16);
  if (o.a instanceof Uint32Array) {
    if (tf32) throw new Error('tf32 A from registers is not modelled');
    for (let lane = 0; lane < 32; lane++) {
      for (let e = 0; e < 8; e++) {
        const { row, col } = fragmentElement('m16n8k16', 'a', lane, e);
        const word = o.a[lane * 4 + (e >>> 1)]!;
        A[row * 16 + col] = value(e & 1 ? word >>> 16 : word & 0xffff);
      }
    }
  } else {
    for (let r = 0; r < 16; r++) {
      for (let k = 0; k < K; k++)
        A[r * 16 + k] = read(descriptorElementAddress(o.a, 16 * o.warp + r, k, o.transposeA, bytes));
    }
  }
  const B = new Float64Array(o.n * 16);
  for (let c = 0; c < o.n; c++) {
    for (let k = 0; k < K; k++)
      B[c * 16 + k] = read(descriptorElementAddress(o.b, c, k, o.transposeB, bytes));
  }
  const sign = (o.negateA ? -1 : 1) * (o.negateB ? -1 : 1);
  const out = new Uint32Array(32 * perLane);
  for (let lane = 0; lane < 32; lane++) {
    for (let i = 0; i < perLane; i++) {
      const { row, col } = wgmmaAccumulatorElement(o.n, 32 * o.warp + lane, i);
      const r = row - 16 * o.warp;
      let sum = o.accumulate ? bitsToF32(o.d[lane * perLane + i]!) : 0;
      for (let k = 0; k < K; k++) sum += sign * A[r * 16 + k]! * B[col * 16 + k]!;
      out[lane * perLane + i] = f32ToBits(sum);
    }
  }
  return out;
}
