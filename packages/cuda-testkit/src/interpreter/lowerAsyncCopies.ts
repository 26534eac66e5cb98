import { swizzleOffset } from '@rayo/cuda-ptx';
import { set64 } from './intMath.js';
import { TENSOR_MAP_HANDLE } from './layout.js';
import { type Context, call, dst, type Lowered, src, stop, unsupported } from './lowering.js';
import { parseAddress } from './lowerMemory.js';
import { misaligned, outsideShared, Window } from './memory.js';
import { splitOperands } from './ptxModule.js';
import { fail, SPIN, type Thread, TWO32 } from './threads.js';

// Asynchronous copies into shared memory (cp.async, bulk and tensor copies) and mbarriers.

/** `cp.async.{ca,cg}.shared.global [dst], [src], size{, srcSize}` and its commit and waits. */
export function lowerCpAsync(ctx: Context): Lowered {
  const { parts, ops, line } = ctx.ins;
  const pattern = parts.join('.');
  if (pattern === 'cp.async.commit_group') return call((_u, _f, t) => t.copies.commit());
  if (pattern === 'cp.async.wait_all') return call((_u, _f, t) => t.copies.waitAll());
  if (pattern === 'cp.async.wait_group') {
    const n = /^\d+$/.test(ops[0] ?? '') ? Number(ops[0]) : fail(`wait_group takes an immediate: ${line}`);
    return call((_u, _f, t) => t.copies.waitGroup(n));
  }
  const cache = parts[2];
  if (
    parts.length !== 5 ||
    (cache !== 'ca' && cache !== 'cg') ||
    parts[3] !== 'shared' ||
    parts[4] !== 'global'
  )
    unsupported(ctx);
  const size = Number(ops[2]);
  if (![4, 8, 16].includes(size) || (cache === 'cg' && size !== 16)) fail(`cp.async size: ${line}`);
  const to = parseAddress(ctx, ops[0]!, 'shared');
  const from = parseAddress(ctx, ops[1]!, 'global');
  const srcSize = ops[3] === undefined ? -1 : src(ctx, 3, 'u32');
  const w = new Window();
  const state = ctx.state;
  return call((u, _f, t) => {
    const at = u[to.base]! + to.offset;
    if ((at & (size - 1)) !== 0) misaligned(line, at, size);
    if (at + size > t.sharedBytes) outsideShared(line, at, size, t.sharedBytes);
    const copied = srcSize < 0 ? size : u[srcSize]!;
    if (copied > size) fail(`${line}: src-size ${copied} is larger than the copy's ${size} bytes`);
    // The bytes past src-size are zeros.
    const data = new Uint8Array(size);
    if (copied > 0) {
      const low = u[from.base]! + from.offset;
      const address = u[from.base + 1]! * TWO32 + low;
      if (w.generation !== state.generation || address < w.start || address + copied > w.end) {
        state.locate(w, address, copied, line);
      }
      if ((low & (size - 1)) !== 0) misaligned(line, address, size);
      const bytes = new Uint8Array(w.words.buffer, w.words.byteOffset + (address - w.start), copied);
      data.set(bytes);
    }
    t.copies.start(() => t.shared8.set(data, at));
  });
}

/** A shared address operand's byte offset in the block's window, checked for 8-byte mbarrier objects. */
function mbarrierAddress(ctx: Context, op: string): (u: Uint32Array, t: Thread) => number {
  const { base, offset } = parseAddress(ctx, op, 'shared');
  const { line } = ctx.ins;
  return (u, t) => {
    const at = u[base]! + offset;
    if ((at & 7) !== 0) misaligned(line, at, 8);
    if (at + 8 > t.sharedBytes) outsideShared(line, at, 8, t.sharedBytes);
    return at;
  };
}

/** `mbarrier.init`, `mbarrier.arrive{.expect_tx}` and `mbarrier.try_wait.parity`, on `.shared::cta`. */
export function lowerMbarrier(ctx: Context): Lowered {
  const { parts, ops, line } = ctx.ins;
  const form = parts.slice(1).join('.');
  const failAt = (message: string) => fail(`${message}: ${line}`);
  switch (form) {
    case 'init.shared::cta.b64': {
      const bar = mbarrierAddress(ctx, ops[0]!);
      const count = src(ctx, 1, 'u32');
      return call((u, _f, t) => t.mbarriers.init(bar(u, t), u[count]!, failAt));
    }
    case 'arrive.shared::cta.b64':
    case 'arrive.expect_tx.shared::cta.b64': {
      const state = ops[0] === '_' ? -1 : dst(ctx, 0, 'b64');
      const bar = mbarrierAddress(ctx, ops[1]!);
      const tx = parts[2] === 'expect_tx' ? src(ctx, 2, 'u32') : -1;
      return call((u, _f, t) => {
        const phase = t.mbarriers.arrive(bar(u, t), tx < 0 ? 0 : u[tx]!, failAt);
        // The state is opaque to kernels; the phase it was taken in will do.
        if (state >= 0) set64(u, state, BigInt(phase));
      });
    }
    case 'try_wait.parity.shared::cta.b64': {
      const p = dst(ctx, 0, 'pred');
      const bar = mbarrierAddress(ctx, ops[1]!);
      const parity = src(ctx, 2, 'u32');
      const next = ctx.pc + 1;
      return stop((u, _f, t) => {
        const done = t.mbarriers.phaseCompleted(bar(u, t), u[parity]! & 1, failAt);
        u[p] = done ? 1 : 0;
        return done ? next : SPIN;
      });
    }
    default:
      return unsupported(ctx);
  }
}

/**
 * `cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [dst], [src], size, [bar]`:
 * lands at once and completes its bytes on the mbarrier (a consumer still
 * waits for the phase, which is when hardware would have landed it).
 */
export function lowerBulkCopy(ctx: Context): Lowered {
  const { parts, ops, line } = ctx.ins;
  if (parts.join('.') !== 'cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes')
    unsupported(ctx);
  const to = parseAddress(ctx, ops[0]!, 'shared');
  const from = parseAddress(ctx, ops[1]!, 'global');
  const size = src(ctx, 2, 'u32');
  const bar = mbarrierAddress(ctx, ops[3]!);
  const w = new Window();
  const state = ctx.state;
  const failAt = (message: string) => fail(`${message}: ${line}`);
  return call((u, _f, t) => {
    const bytes = u[size]!;
    const at = u[to.base]! + to.offset;
    const low = u[from.base]! + from.offset;
    const address = u[from.base + 1]! * TWO32 + low;
    if (bytes % 16 !== 0) failAt(`bulk copy of ${bytes} bytes (a multiple of 16 is needed)`);
    if ((at & 15) !== 0) misaligned(line, at, 16);
    if ((low & 15) !== 0) misaligned(line, address, 16);
    if (at + bytes > t.sharedBytes) outsideShared(line, at, bytes, t.sharedBytes);
    if (bytes > 0) {
      if (w.generation !== state.generation || address < w.start || address + bytes > w.end) {
        state.locate(w, address, bytes, line);
      }
      t.shared8.set(new Uint8Array(w.words.buffer, w.words.byteOffset + (address - w.start), bytes), at);
    }
    t.mbarriers.completeTx(bar(u, t), bytes, failAt);
  });
}

/**
 * `cp.async.bulk.tensor.Nd.shared::cluster.global.tile.mbarrier::complete_tx::bytes [dst], [map, {c…}], [bar]`:
 * copies the map's box at the coordinates into shared memory at once, rows
 * of the box's inner extent packed one after another and swizzled by their
 * address (swizzle.ts), elements outside the tensor as zeros, and completes
 * the whole box's bytes on the mbarrier.
 */
export function lowerTensorCopy(ctx: Context): Lowered {
  const { parts, ops, line } = ctx.ins;
  const rank = Number(/^([1-5])d$/.exec(parts[4] ?? '')?.[1] ?? Number.NaN);
  const form = `cp.async.bulk.tensor.${rank}d.shared::cluster.global.tile.mbarrier::complete_tx::bytes`;
  if (parts.join('.') !== form) unsupported(ctx);
  const to = parseAddress(ctx, ops[0]!, 'shared');
  const m = /^\[([^,\]]+),\s*\{([^}]*)\}\]$/.exec(ops[1]!) ?? fail(`tensor operand: ${line}`);
  const mapSlot = ctx.layout.source(m[1]!.trim(), 'b64', line);
  const coords = splitOperands(m[2]!).map((c) => ctx.layout.source(c, 's32', line));
  if (coords.length !== rank) fail(`${rank}d copy with ${coords.length} coordinates: ${line}`);
  const bar = mbarrierAddress(ctx, ops[2]!);
  const state = ctx.state;
  const w = new Window();
  const failAt = (message: string) => fail(`${message}: ${line}`);
  return call((u, _f, t) => {
    const handle = BigInt(u[mapSlot]!) + (BigInt(u[mapSlot + 1]!) << 32n) - TENSOR_MAP_HANDLE;
    const map =
      (handle >= 0n && handle < 256n ? state.tensorMaps[Number(handle)] : undefined) ??
      failAt('the tensor-map operand is not the address of a tensor-map parameter');
    if (map.dims.length !== rank) failAt(`a rank-${map.dims.length} map in a ${rank}d copy`);
    const elem = map.dtype === 'f32' ? 4 : 2;
    const rowBytes = map.box[0]! * elem;
    const span = { none: 0, '32B': 32, '64B': 64, '128B': 128 }[map.swizzle];
    if (span > 0 && rowBytes !== span)
      failAt(`the interpreter models swizzled boxes of rows of exactly ${span} bytes`);
    const at = u[to.base]! + to.offset;
    if ((at & (span === 128 ? 1023 : 127)) !== 0) misaligned(line, at, span === 128 ? 1024 : 128);
    const c = coords.map((slot) => u[slot]! | 0);
    const rows = map.box.slice(1).reduce((x, y) => x * y, 1);
    const total = rows * rowBytes;
    if (at + total > t.sharedBytes) outsideShared(line, at, total, t.sharedBytes);
    const row = new Uint8Array(rowBytes);
    for (let r = 0; r < rows; r++) {
      // The row's outer coordinates, and whether all of them are inside.
      let rest = r;
      let offset = map.address;
      let inside = true;
      for (let d = 1; d < rank; d++) {
        const g = c[d]! + (rest % map.box[d]!);
        rest = Math.floor(rest / map.box[d]!);
        if (g < 0 || g >= map.dims[d]!) inside = false;
        offset += BigInt(g) * BigInt(map.strides[d - 1]!);
      }
      row.fill(0);
      const first = Math.max(0, -c[0]!);
      const last = Math.min(map.box[0]!, map.dims[0]! - c[0]!);
      if (inside && last > first) {
        const address = Number(offset) + (c[0]! + first) * elem;
        const bytes = (last - first) * elem;
        if (w.generation !== state.generation || address < w.start || address + bytes > w.end) {
          state.locate(w, address, bytes, line);
        }
        row.set(
          new Uint8Array(w.words.buffer, w.words.byteOffset + (address - w.start), bytes),
          first * elem,
        );
      }
      for (let chunk = 0; chunk < rowBytes; chunk += 16) {
        const place =
          span > 0 ? swizzleOffset(map.swizzle, at + r * rowBytes + chunk) : at + r * rowBytes + chunk;
        t.shared8.set(row.subarray(chunk, chunk + 16), place);
      }
    }
    t.mbarriers.completeTx(bar(u, t), total, failAt);
  });
}
