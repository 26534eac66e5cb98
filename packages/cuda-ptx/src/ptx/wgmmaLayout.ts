import { describeValue, misuse } from './errors.js';
import { type SharedSwizzle, SWIZZLE_SPAN } from './swizzle.js';

/**
 * The pure parts of sm_90a warpgroup MMA: the 64-bit shared-memory matrix
 * descriptor that `wgmma.mma_async` reads its A and B tiles through, and
 * where each accumulator register of a warpgroup's 64×N tile lives.
 */

/** The N of `wgmma.mma_async…m64nNk16`: 8 … 256 in steps of 8. */
export type WgmmaN = number;

export function isWgmmaN(n: unknown): n is WgmmaN {
  return typeof n === 'number' && Number.isInteger(n) && n >= 8 && n <= 256 && n % 8 === 0;
}

/** What a matrix descriptor says of a tile in shared memory. */
export interface WgmmaDescriptorFields {
  /** The tile's shared-window byte address (16-byte aligned, below 256 KiB). */
  readonly address: number;
  /**
   * Leading dimension byte offset: between core matrices along the K
   * direction for an unswizzled tile; unused for swizzled K-major tiles (by
   * convention 16).
   */
  readonly leadingByteOffset: number;
  /** Stride dimension byte offset: between groups of 8 rows (8 × the row span for a swizzled tile). */
  readonly strideByteOffset: number;
  /** The tile's swizzle, as written by swizzle.ts or TMA. */
  readonly swizzle: SharedSwizzle;
  /** Bits 7–9 of the address at which the swizzle pattern starts, where the tile is not 1024-byte aligned (0–7). */
  readonly baseOffset?: number;
}

/** The descriptor's 2-bit layout codes (bits 62–63). */
const LAYOUT_CODE: Readonly<Record<SharedSwizzle, bigint>> = { none: 0n, '128B': 1n, '64B': 2n, '32B': 3n };

/** An address or offset field: bytes / 16 in 14 bits. */
function encoded(argument: string, bytes: unknown): bigint {
  if (
    typeof bytes !== 'number' ||
    !Number.isInteger(bytes) ||
    bytes < 0 ||
    bytes >= 2 ** 18 ||
    bytes % 16 !== 0
  ) {
    throw misuse('wgmmaDescriptor', 'descriptor fields are 16-byte multiples below 256 KiB', {
      argument,
      expected: 'a multiple of 16 in 0 .. 262128',
      actual: describeValue(bytes),
    });
  }
  return BigInt(bytes >>> 4);
}

/**
 * The descriptor's bits other than the start address: what
 * `KernelBuilder.wgmmaDescriptor` ORs onto an address known only at run time.
 */
export function wgmmaDescriptorFlags(fields: Omit<WgmmaDescriptorFields, 'address'>): bigint {
  const layout = LAYOUT_CODE[fields.swizzle];
  if (layout === undefined || !Object.hasOwn(SWIZZLE_SPAN, fields.swizzle)) {
    throw misuse('wgmmaDescriptor', 'unknown swizzle', {
      argument: 'swizzle',
      expected: 'none, 32B, 64B or 128B',
      actual: describeValue(fields.swizzle),
    });
  }
  const base = fields.baseOffset ?? 0;
  if (!Number.isInteger(base) || base < 0 || base > 7) {
    throw misuse('wgmmaDescriptor', 'the base offset is 3 bits', {
      argument: 'baseOffset',
      expected: 'an integer in 0 .. 7',
      actual: describeValue(base),
    });
  }
  return (
    (encoded('leadingByteOffset', fields.leadingByteOffset) << 16n) |
    (encoded('strideByteOffset', fields.strideByteOffset) << 32n) |
    (BigInt(base) << 49n) |
    (layout << 62n)
  );
}

/** The 64-bit matrix descriptor of a shared-memory tile at a known address. */
export function wgmmaDescriptor(fields: WgmmaDescriptorFields): bigint {
  return wgmmaDescriptorFlags(fields) | encoded('address', fields.address);
}

/**
 * Row and column, in the warpgroup's 64×N accumulator tile, of register
 * `index` (0 … N/2 − 1) of thread `thread` (0 … 127 of the warpgroup): warp
 * w owns rows 16w … 16w + 15, and each 8-column block is laid out as an
 * mma.sync m16n8 accumulator.
 */
export function wgmmaAccumulatorElement(
  n: WgmmaN,
  thread: number,
  index: number,
): { row: number; col: number } {
  if (!isWgmmaN(n) || !Number.isInteger(thread) || thread < 0 || thread > 127 || !Number.isInteger(index)) {
    throw misuse('wgmmaAccumulatorElement', 'no such accumulator element', {
      expected: 'N a multiple of 8 in 8 .. 256, a thread in 0 .. 127 and a register in 0 .. N/2 - 1',
      actual: `N ${describeValue(n)}, thread ${describeValue(thread)}, register ${describeValue(index)}`,
    });
  }
  if (index < 0 || index >= n / 2) {
    throw misuse('wgmmaAccumulatorElement', 'no such accumulator register', {
      argument: 'index',
      expected: `an integer in 0 .. ${n / 2 - 1}`,
      actual: describeValue(index),
    });
  }
  const lane = thread & 31;
  const row = 16 * (thread >>> 5) + (lane >>> 2) + 8 * ((index >>> 1) & 1);
  const col = 8 * (index >>> 2) + 2 * (lane & 3) + (index & 1);
  return { row, col };
}
