import type { KernelBuilder } from '../ptx/kernel.js';
import type { F32, Param, Pred, R32, R64 } from '../ptx/operands.js';
import type { ParamType } from '../ptx/types.js';
import { loadPointer, loadU32 } from './common.js';
import { loadDeviceU32 } from './decodingAccess.js';

// Where the attention kernel finds a lane's K and V rows: in a contiguous
// head-first cache, its pointers advanced a group at a time, or in page pools
// through a sequence's block table, looked up per token.

type Params = Readonly<Record<string, Param<ParamType>>>;

/** The parameters of the paged form, in place of maxSeq and the length. */
export const PAGED_PARAMS: Record<string, ParamType> = {
  blockTables: 'ptr',
  seqLens: 'ptr',
  pageSize: 'u32',
  maxPages: 'u32',
  kvHeads: 'u32',
  numPages: 'u32',
};

/** A token's K and V row addresses (plus `offset` bytes), and whether it may be read. */
export interface RowAddress {
  readonly k: R64;
  readonly v: R64;
  readonly offset: number;
  readonly ok: Pred | undefined;
}

export interface LaneRows {
  /**
   * The row of the lane's token `first` tokens after its slot's first of the
   * current group (`offset` bytes past it in a contiguous cache); `token`, where
   * given, says whether the token lies inside the split.
   */
  at(first: number, offset: number, token: Pred | undefined): RowAddress;
  /** Moves to the next group of `bytes` of a contiguous cache. */
  advance(bytes: number): void;
}

interface RowGeometry {
  readonly kvHead: R32;
  /** The warp's first token of the current group (the loop's counter). */
  readonly wb: R32;
  readonly slot: R32;
  readonly column: R32;
  readonly headDim: number;
  readonly cacheBytes: number;
}

/** Rows of a contiguous cache [nKvHeads, maxSeq, headDim]: pointers set once, advanced per group. */
export function cacheRows(k: KernelBuilder, p: Params, g: RowGeometry): LaneRows {
  const row = k.madLo('u32', k.reg('u32'), g.kvHead, loadU32(k, p, 'maxSeq'), g.wb);
  k.add('u32', row, row, g.slot);
  const rowElement = k.madLo('u32', k.reg('u32'), row, g.headDim, g.column);
  const kAt = k.elementAddress(loadPointer(k, p, 'kCache'), rowElement, g.cacheBytes);
  const vAt = k.elementAddress(loadPointer(k, p, 'vCache'), rowElement, g.cacheBytes);
  return {
    at: (_first, offset, token) => ({ k: kAt, v: vAt, offset, ok: token }),
    advance(bytes) {
      k.add('u64', kAt, kAt, bytes);
      k.add('u64', vAt, vAt, bytes);
    },
  };
}

/**
 * Rows of page pools [numPages, kvHeads, pageSize, headDim]: token t of
 * sequence b lies in page blockTables[b, ⌊t / pageSize⌋] at offset t mod
 * pageSize (a shift and a mask where `pageShift` gives pageSize as a power
 * of two). A page outside the pool, or a token past the split, reads nothing.
 */
export function pagedRows(
  k: KernelBuilder,
  p: Params,
  g: RowGeometry & { readonly sequence: R32; readonly pageShift?: number },
): LaneRows {
  const pageSize = loadU32(k, p, 'pageSize');
  const maxPages = loadU32(k, p, 'maxPages');
  const kvHeads = loadU32(k, p, 'kvHeads');
  const numPages = loadU32(k, p, 'numPages');
  const tables = k.elementAddress(
    loadPointer(k, p, 'blockTables'),
    k.mulLo('u32', k.reg('u32'), g.sequence, maxPages),
    4,
  );
  const kPool = loadPointer(k, p, 'kCache');
  const vPool = loadPointer(k, p, 'vCache');
  return {
    at(first, _offset, token) {
      const t = k.add('u32', k.reg('u32'), g.wb, g.slot);
      if (first > 0) k.add('u32', t, t, first);
      const shift = g.pageShift;
      const index =
        shift === undefined ? k.div('u32', k.reg('u32'), t, pageSize) : k.shr('u32', k.reg('u32'), t, shift);
      const inPage =
        shift === undefined
          ? k.sub('u32', k.reg('u32'), t, k.mulLo('u32', k.reg('u32'), index, pageSize))
          : k.and('b32', k.reg('u32'), t, 2 ** shift - 1);
      const tableAt = k.elementAddress(tables, index, 4);
      const page = k.reg('u32');
      if (token) {
        // A token past the split reads no table entry: numPages fails the check below.
        k.mov('u32', page, numPages);
        k.predicated(token, () => k.ldGlobal('u32', page, tableAt));
      } else k.ldGlobal('u32', page, tableAt);
      // Negative entries are huge as u32.
      const ok = k.setp('lt', 'u32', k.reg('pred'), page, numPages);
      const headRow = k.madLo('u32', k.reg('u32'), page, kvHeads, g.kvHead);
      const row = k.madLo('u32', k.reg('u32'), headRow, pageSize, inPage);
      const element = k.madLo('u32', k.reg('u32'), row, g.headDim, g.column);
      return {
        k: k.elementAddress(kPool, element, g.cacheBytes),
        v: k.elementAddress(vPool, element, g.cacheBytes),
        offset: 0,
        ok,
      };
    },
    advance() {},
  };
}

/** acc / l; with `zeroEmpty`, 0 where nothing was attended (l = 0, an idle sequence). */
export function normalised(k: KernelBuilder, acc: F32, l: F32, zeroEmpty = false): F32 {
  const value = k.div('f32', k.reg('f32'), acc, l, 'rn');
  if (!zeroEmpty) return value;
  const some = k.setp('gt', 'f32', k.reg('pred'), l, 0);
  return k.selp('f32', k.reg('f32'), value, 0, some);
}

/**
 * The rows a block attends: paged, sequence `sequence`'s length from
 * `seqLens`; else `seqLenAt` read on the device (`deviceLength`) or the
 * `seqLen` parameter (`fromPosition`: `seqLenAt` holds the last row's
 * position, one less). A length read on the device outside 1 … its bound
 * (the table's capacity, maxSeq) is 0: 0, idle rows and negatives wrap past
 * the bound as u32 and read nothing.
 */
export function attendedLength(
  k: KernelBuilder,
  p: Params,
  from: { readonly sequence?: R32; readonly deviceLength?: boolean; readonly fromPosition?: boolean },
): R32 {
  let given: R32;
  let bound: R32;
  if (from.sequence) {
    given = loadDeviceU32(k, k.elementAddress(loadPointer(k, p, 'seqLens'), from.sequence, 4));
    bound = k.mulLo('u32', k.reg('u32'), loadU32(k, p, 'pageSize'), loadU32(k, p, 'maxPages'));
  } else if (from.deviceLength) {
    given = loadDeviceU32(k, loadPointer(k, p, 'seqLenAt'));
    // ropeAttention's tensor holds the new row's position: the length is one more.
    if (from.fromPosition) k.add('u32', given, given, 1);
    bound = loadU32(k, p, 'maxSeq');
  } else return loadU32(k, p, 'seqLen');
  const inRange = k.setp('lt', 'u32', k.reg('pred'), k.sub('u32', k.reg('u32'), given, 1), bound);
  return k.selp('u32', k.reg('u32'), given, 0, inRange);
}
