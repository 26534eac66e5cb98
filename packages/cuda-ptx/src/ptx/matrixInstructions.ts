import { ArithmeticInstructions } from './arithmeticInstructions.js';
import { describeValue } from './errors.js';
import type { Tuple, Vec2, Vec4 } from './instructionTypes.js';
import {
  type FragmentCoordinate,
  fragmentRegisters,
  MMA_SHAPES,
  type MmaInputType,
  type MmaOperand,
  type MmaShape,
} from './mmaFragments.js';
import type { AddressLike, F32, Operand, R16, R32 } from './operands.js';
import { SHARED_SWIZZLES, type SharedSwizzle, swizzleMask } from './swizzle.js';
import type { Requirement } from './target.js';
import type { ScalarType } from './types.js';

/** mma.sync with f16/bf16 m16n8k16 or tf32 m16n8k8, cp.async and the packed conversions came with sm_80. */
const SM80: Requirement = { sm: 80, ptx: '7.0' };
/** ldmatrix came with sm_75. */
const LDMATRIX: Requirement = { sm: 75, ptx: '6.5' };

/** How many 8×8 matrices one ldmatrix loads, one register of each per lane. */
export type LdmatrixCount = 1 | 2 | 4;
/** `.ca` caches in L1 and L2 (4, 8 or 16 bytes); `.cg` only in L2 (16 bytes). */
export type CpAsyncCache = 'ca' | 'cg';
export type CpAsyncBytes = 4 | 8 | 16;

export interface LdmatrixOptions {
  /** `.trans`: each lane gets a column pair of the stored matrix rather than a row pair. */
  readonly trans?: boolean;
}
export interface CpAsyncOptions {
  /**
   * `src-size`: copy only this many bytes (≤ the copy's size) and zero the
   * rest of the destination, for tiles that run past the end of a matrix.
   */
  readonly srcBytes?: Operand<'u32'>;
}
/** A lane's place in an mma fragment: `groupID` = lane >> 2, `threadInGroup` = lane & 3. */
export interface MmaLaneCoordinates {
  readonly groupId: R32;
  readonly threadInGroup: R32;
}

/**
 * The tensor-core and asynchronous-copy instructions of KernelBuilder:
 * warp-collective `mma.sync` and `ldmatrix`, `cp.async` with its groups, and
 * the conversions and packing that feed them (tf32 rounding, two halves in
 * one `.b32`). Fragment layouts are in mmaFragments.ts, shared-memory
 * swizzles in swizzle.ts.
 */
export abstract class MatrixInstructions extends ArithmeticInstructions {
  // ---------------------------------------------------------------- mma.sync

  /**
   * `mma.sync.aligned.shape.row.col.f32.type.type.f32 d, a, b, c`: D = A·B + C
   * for one warp, A row-major (M×K) and B column-major (K×N), f32
   * accumulators. `m16n8k16` takes f16 or bf16 (two per `.b32` register),
   * `m16n8k8` tf32 (one per register, e.g. from `cvtTf32`). A is 4 registers,
   * B 2, C and D 4 (`.f32`); see `fragmentElement` for which element each
   * holds. Every lane of the warp must execute it.
   */
  mmaSync<D extends Vec4<F32>>(
    shape: MmaShape,
    type: MmaInputType,
    d: D,
    a: Vec4<R32>,
    b: Vec2<R32>,
    c: Vec4<F32>,
  ): D {
    const call = 'mmaSync';
    this.check.oneOf(call, 'shape', shape, Object.keys(MMA_SHAPES));
    this.check.oneOf(call, 'type', type, MMA_SHAPES[shape].inputs, ` for ${shape}`);
    this.check.require(call, `mma.sync.${shape} .${type}`, SM80);
    const regs = (argument: MmaOperand | 'd', value: unknown, regType: ScalarType) =>
      this.#fragment(
        call,
        argument,
        value,
        fragmentRegisters(shape, argument === 'd' ? 'c' : argument),
        regType,
      );
    const text = [regs('d', d, 'f32'), regs('a', a, 'u32'), regs('b', b, 'u32'), regs('c', c, 'f32')];
    this.emit(`mma.sync.aligned.${shape}.row.col.f32.${type}.${type}.f32 ${text.join(', ')}`);
    return d;
  }

  /** The lane's `groupID` and `threadInGroup` (from `%laneid`), the terms of every fragment coordinate. */
  mmaLaneCoordinates(): MmaLaneCoordinates {
    this.live('mmaLaneCoordinates');
    const lane = this.reg('u32');
    this.emit(`mov.u32 ${lane}, %laneid`);
    return {
      groupId: this.shr('u32', this.reg('u32'), lane, 2),
      threadInGroup: this.and('b32', this.reg('u32'), lane, 3),
    };
  }

  /**
   * The byte offset of fragment element `element` (an entry of
   * `MMA_SHAPES[shape].a`, `.b` or `.c`) of this lane in a row-major tile
   * with rows `rowBytes` apart and elements `elementBytes` wide: where to
   * load it from or store it to.
   */
  mmaElementOffset(
    lane: MmaLaneCoordinates,
    element: FragmentCoordinate,
    rowBytes: number,
    elementBytes: number,
  ): R32 {
    const call = 'mmaElementOffset';
    this.live(call);
    this.check.count(call, 'rowBytes', rowBytes, 0);
    this.check.count(call, 'elementBytes', elementBytes, 1);
    const row = this.#affine(lane, element.rowPerGroup, element.rowPerThread, element.row);
    const col = this.#affine(lane, element.colPerGroup, element.colPerThread, element.col);
    const colBytes = this.mulLo('u32', col, col, elementBytes);
    return this.madLo('u32', this.reg('u32'), row, rowBytes, colBytes);
  }

  // ---------------------------------------------------------------- ldmatrix

  /**
   * `ldmatrix.sync.aligned.m8n8.xN{.trans}.shared.b16 d, [a]`: loads N 8×8
   * matrices of 16-bit elements from shared memory, warp-collectively.
   * Lanes 8i … 8i+7 give the addresses of the 8 rows (16 contiguous bytes
   * each) of matrix i; lane l gets, in `d[i]`, elements 2·(l & 3) and
   * 2·(l & 3) + 1 of row l >> 2 of matrix i (of column l >> 2 with `.trans`),
   * the first in the low half: exactly an mma A or B fragment register.
   */
  ldmatrix<N extends LdmatrixCount, D extends Tuple<R32, N>>(
    count: N,
    d: D,
    a: AddressLike,
    opts: LdmatrixOptions = {},
  ): D {
    const call = 'ldmatrix';
    this.check.oneOf(call, 'count', String(count), ['1', '2', '4']);
    this.check.require(call, 'ldmatrix', LDMATRIX);
    const regs = this.#fragment(call, 'd', d, count, 'u32');
    const trans = opts.trans ? '.trans' : '';
    this.emit(
      `ldmatrix.sync.aligned.m8n8.x${count}${trans}.shared.b16 ${regs}, ${this.check.address(call, 'a', a, 'shared')}`,
    );
    return d;
  }

  // ---------------------------------------------------------------- cp.async

  /**
   * `cp.async.cache.shared.global [dst], [src], bytes{, srcBytes}`: starts a
   * copy from global to shared memory that completes asynchronously. Copies
   * are batched with `cpAsyncCommitGroup` and awaited with `cpAsyncWaitGroup`;
   * other threads see the data only after the wait and a barrier.
   */
  cpAsync(
    cache: CpAsyncCache,
    dst: AddressLike,
    src: AddressLike,
    bytes: CpAsyncBytes,
    opts: CpAsyncOptions = {},
  ): void {
    const call = 'cpAsync';
    this.check.oneOf(call, 'cache', cache, ['ca', 'cg']);
    this.check.oneOf(
      call,
      'bytes',
      String(bytes),
      cache === 'cg' ? ['16'] : ['4', '8', '16'],
      ` for .${cache}`,
    );
    this.check.require(call, 'cp.async', SM80);
    const srcSize = opts.srcBytes === undefined ? '' : `, ${this.#srcBytes(call, opts.srcBytes, bytes)}`;
    this.emit(
      `cp.async.${cache}.shared.global ${this.check.address(call, 'dst', dst, 'shared')}, ${this.check.address(call, 'src', src, 'global')}, ${bytes}${srcSize}`,
    );
  }

  /** `cp.async.commit_group`: the copies this thread started since the last commit form one group. */
  cpAsyncCommitGroup(): void {
    this.check.require('cpAsyncCommitGroup', 'cp.async', SM80);
    this.emit('cp.async.commit_group');
  }

  /** `cp.async.wait_group n`: waits until at most the `n` most recent groups of this thread are pending. */
  cpAsyncWaitGroup(n: number): void {
    const call = 'cpAsyncWaitGroup';
    this.check.count(call, 'n', n, 0, 7);
    this.check.require(call, 'cp.async', SM80);
    this.emit(`cp.async.wait_group ${n}`);
  }

  /** `cp.async.wait_all`: waits for every copy of this thread, committed or not. */
  cpAsyncWaitAll(): void {
    this.check.require('cpAsyncWaitAll', 'cp.async', SM80);
    this.emit('cp.async.wait_all');
  }

  // ------------------------------------------------------ conversions, packing

  /** `cvt.rna.tf32.f32 d, a`: `a` rounded (to nearest, ties away) to tf32's 10 mantissa bits, in a `.b32`. */
  cvtTf32(d: R32, a: F32): R32 {
    const call = 'cvtTf32';
    this.check.require(call, 'cvt.rna.tf32.f32', SM80);
    this.emit(
      `cvt.rna.tf32.f32 ${this.check.reg(call, 'd', d, 'u32')}, ${this.check.reg(call, 'a', a, 'f32')}`,
    );
    return d;
  }

  /** `cvt.rn.{f16,bf16}x2.f32 d, hi, lo`: two f32 rounded to halves, `lo` in the low 16 bits of `d`. */
  cvtPack(type: 'f16' | 'bf16', d: R32, lo: F32, hi: F32): R32 {
    const call = 'cvtPack';
    this.check.oneOf(call, 'type', type, ['f16', 'bf16']);
    this.check.require(call, `cvt.rn.${type}x2.f32`, SM80);
    // PTX puts its first source in the upper half.
    this.emit(
      `cvt.rn.${type}x2.f32 ${this.check.reg(call, 'd', d, 'u32')}, ${this.check.reg(call, 'hi', hi, 'f32')}, ${this.check.reg(call, 'lo', lo, 'f32')}`,
    );
    return d;
  }

  /** `mov.b32 d, {lo, hi}`: two 16-bit values in one register, `lo` in the low half. */
  packHalves(d: R32, lo: R16, hi: R16): R32 {
    const call = 'packHalves';
    this.emit(
      `mov.b32 ${this.check.reg(call, 'd', d, 'u32')}, {${this.check.reg(call, 'lo', lo, 'b16')}, ${this.check.reg(call, 'hi', hi, 'b16')}}`,
    );
    return d;
  }

  /** `mov.b32 {lo, hi}, a`: the two halves of a register. */
  unpackHalves(lo: R16, hi: R16, a: R32): void {
    const call = 'unpackHalves';
    this.emit(
      `mov.b32 {${this.check.reg(call, 'lo', lo, 'b16')}, ${this.check.reg(call, 'hi', hi, 'b16')}}, ${this.check.reg(call, 'a', a, 'u32')}`,
    );
  }

  // ---------------------------------------------------------------- swizzle

  /**
   * `d = swizzleOffset(swizzle, offset)` in PTX: a logical byte offset in a
   * tile of span-wide rows to its swizzled place (see swizzle.ts).
   */
  swizzle(swizzle: SharedSwizzle, d: R32, offset: R32): R32 {
    const call = 'swizzle';
    this.check.oneOf(call, 'swizzle', swizzle, SHARED_SWIZZLES);
    this.check.reg(call, 'd', d, 'u32');
    this.check.reg(call, 'offset', offset, 'u32');
    const mask = swizzleMask(swizzle);
    if (mask === 0) {
      this.emit(`mov.u32 ${d}, ${offset}`);
      return d;
    }
    // (offset >> 7 & m) << 4 is (offset >> 3) & (m << 4).
    const line = this.and('b32', this.reg('u32'), this.shr('u32', this.reg('u32'), offset, 3), mask);
    return this.xor('b32', d, offset, line);
  }

  // ---------------------------------------------------------------- internals

  /** `perGroup · groupID + perThread · threadInGroup + base`, without the terms that are 0. */
  #affine(lane: MmaLaneCoordinates, perGroup: number, perThread: number, base: number): R32 {
    const d = this.reg('u32');
    if (perGroup !== 0) this.madLo('u32', d, lane.groupId, perGroup, base);
    if (perThread !== 0) this.madLo('u32', d, lane.threadInGroup, perThread, perGroup !== 0 ? d : base);
    if (perGroup === 0 && perThread === 0) this.emit(`mov.u32 ${d}, ${base}`);
    return d;
  }

  /** A brace list of exactly `count` registers of `type`. */
  #fragment(call: string, argument: string, value: unknown, count: number, type: ScalarType): string {
    if (!Array.isArray(value) || value.length !== count) {
      throw this.check.error(call, 'wrong fragment register count', {
        argument,
        expected: `${count} registers`,
        actual: Array.isArray(value) ? `${value.length} registers` : describeValue(value),
      });
    }
    return `{${value.map((r, i) => this.check.reg(call, `${argument}[${i}]`, r, type)).join(', ')}}`;
  }

  /** The `src-size` of a cp.async: a register, or an immediate no larger than the copy. */
  #srcBytes(call: string, srcBytes: unknown, bytes: number): string {
    if (typeof srcBytes === 'number') this.check.count(call, 'opts.srcBytes', srcBytes, 0, bytes);
    return this.check.src(call, 'opts.srcBytes', srcBytes, 'u32');
  }
}
