import { MMA_SHAPES, type MmaInputType, type MmaShape } from '@rayo/cuda-ptx';
import { ldmatrixWarp, mmaSyncWarp } from '../tensorCoreSemantics.js';
import { decodeWgmmaDescriptor, type WgmmaDescriptor, wgmmaWarp } from '../wgmmaSemantics.js';
import { widthOf } from './layout.js';
import { type Context, inline, type Lowered, src, stop, unsupported } from './lowering.js';
import { parseAddress } from './lowerMemory.js';
import { misaligned, outsideShared } from './memory.js';
import { splitOperands } from './ptxModule.js';
import { fail, type Thread, WARP, type WarpSite } from './threads.js';

// mma.sync, ldmatrix and wgmma: warp-wide tensor-core instructions.

/** The register slots of a brace list `{%r1, %r2, ...}` of `count` registers. */
function registerList(ctx: Context, op: string, count: number, type: string, dest: boolean): number[] {
  const names = splitOperands(op.replace(/^\{|\}$/g, ''));
  if (!op.startsWith('{') || names.length !== count)
    fail(`expected ${count} registers in ${op}: ${ctx.ins.line}`);
  return names.map((n) =>
    dest ? ctx.layout.dest(n, widthOf(type), ctx.ins.line) : ctx.layout.source(n, type, ctx.ins.line),
  );
}

/** Each lane's registers `slots` into `words`, lane-major. */
function gatherLanes(lanes: readonly Thread[], slots: readonly number[], words: Uint32Array): void {
  const count = slots.length;
  for (let lane = 0; lane < 32; lane++) {
    const u = lanes[lane]!.u;
    for (let i = 0; i < count; i++) words[lane * count + i] = u[slots[i]!]!;
  }
}

/** Lane-major `words` into each lane's registers `slots`. */
function scatterLanes(lanes: readonly Thread[], slots: readonly number[], words: Uint32Array): void {
  const count = slots.length;
  for (let lane = 0; lane < 32; lane++) {
    const u = lanes[lane]!.u;
    for (let i = 0; i < count; i++) u[slots[i]!] = words[lane * count + i]!;
  }
}

/** A warp-synchronous instruction that needs all 32 lanes (`.aligned` tensor-core instructions). */
function wholeWarp(line: string, complete: (lanes: readonly Thread[]) => void): Lowered {
  const site: WarpSite = {
    line,
    complete: (lanes) => {
      const missing = lanes.indexOf(undefined);
      if (missing >= 0) fail(`lane ${missing} of the warp did not execute ${line} (it needs all 32 lanes)`);
      complete(lanes as readonly Thread[]);
    },
  };
  return stop((_u, _f, t) => {
    t.site = site;
    t.mask = 0xffffffff;
    return WARP;
  });
}

/** `mma.sync.aligned.shape.row.col.f32.type.type.f32 d, a, b, c`. */
export function lowerMma(ctx: Context): Lowered {
  const { parts, ops, line } = ctx.ins;
  const shape = parts[3] as MmaShape;
  const type = parts[7] as MmaInputType;
  const info = Object.hasOwn(MMA_SHAPES, shape) ? MMA_SHAPES[shape] : undefined;
  const form = `mma.sync.aligned.${shape}.row.col.f32.${type}.${type}.f32`;
  if (!info?.inputs.includes(type) || parts.join('.') !== form) unsupported(ctx);
  const per = info.elementsPerRegister;
  const d = registerList(ctx, ops[0]!, info.c.length, 'f32', true);
  const a = registerList(ctx, ops[1]!, info.a.length / per, 'b32', false);
  const b = registerList(ctx, ops[2]!, info.b.length / per, 'b32', false);
  const c = registerList(ctx, ops[3]!, info.c.length, 'f32', false);
  const aWords = new Uint32Array(32 * a.length);
  const bWords = new Uint32Array(32 * b.length);
  const cWords = new Uint32Array(32 * c.length);
  return wholeWarp(line, (lanes) => {
    gatherLanes(lanes, a, aWords);
    gatherLanes(lanes, b, bWords);
    gatherLanes(lanes, c, cWords);
    scatterLanes(lanes, d, mmaSyncWarp(shape, type, aWords, bWords, cWords));
  });
}

/** `ldmatrix.sync.aligned.m8n8.xN{.trans}.shared.b16 d, [a]`. */
export function lowerLdmatrix(ctx: Context): Lowered {
  const { parts, ops, line } = ctx.ins;
  const trans = parts[5] === 'trans';
  const count = Number(/^x([124])$/.exec(parts[4] ?? '')?.[1] ?? Number.NaN);
  const form = `ldmatrix.sync.aligned.m8n8.x${count}${trans ? '.trans' : ''}.shared.b16`;
  if (Number.isNaN(count) || parts.join('.') !== form) unsupported(ctx);
  const d = registerList(ctx, ops[0]!, count, 'b32', true);
  const { base, offset } = parseAddress(ctx, ops[1]!, 'shared');
  return wholeWarp(line, (lanes) => {
    const out = ldmatrixWarp(count, trans, (matrix, row) => {
      const t = lanes[8 * matrix + row]!;
      const at = t.u[base]! + offset;
      if ((at & 15) !== 0) misaligned(line, at, 16);
      if (at + 16 > t.sharedBytes) outsideShared(line, at, 16, t.sharedBytes);
      return t.shared16.subarray(at >>> 1, (at >>> 1) + 8);
    });
    scatterLanes(lanes, d, out);
  });
}

/**
 * `wgmma.mma_async.sync.aligned.m64nNk16.f32.T.T d, a, b-desc, scale-d, ±1, ±1{, trans-a}, trans-b`
 * (operands K-major, or MN-major where transposed), and its fence, commit
 * and wait, which have nothing to order here.
 */
export function lowerWgmma(ctx: Context): Lowered {
  const { parts, ops, line } = ctx.ins;
  const pattern = parts.join('.');
  if (['wgmma.fence.sync.aligned', 'wgmma.commit_group.sync.aligned'].includes(pattern)) return inline('');
  if (pattern === 'wgmma.wait_group.sync.aligned') {
    if (!/^\d+$/.test(ops[0] ?? '')) fail(`wait_group takes an immediate: ${line}`);
    return inline('');
  }
  const type = parts[6];
  const tf32 = type === 'tf32';
  const n = Number(new RegExp(`^m64n(\\d+)k${tf32 ? 8 : 16}$`).exec(parts[4] ?? '')?.[1] ?? Number.NaN);
  const form = `wgmma.mma_async.sync.aligned.m64n${n}k${tf32 ? 8 : 16}.f32.${type}.${type}`;
  if (
    !(n >= 8 && n <= 256 && n % 8 === 0) ||
    (type !== 'bf16' && type !== 'f16' && type !== 'tf32') ||
    pattern !== form
  ) {
    unsupported(ctx);
  }
  const fromRegisters = ops[1]!.startsWith('{');
  if (tf32 && fromRegisters) fail(`the interpreter models tf32 wgmma with A in shared memory only: ${line}`);
  const [scaleOp, scaleA, scaleB, ...trans] = ops.slice(3);
  if (trans.length !== (tf32 ? 0 : fromRegisters ? 1 : 2) || trans.some((t) => t !== '0' && t !== '1')) {
    fail(`wgmma transpose immediates are 0 or 1: ${line}`);
  }
  const [transposeA, transposeB] = fromRegisters
    ? [false, trans[0] === '1']
    : [trans[0] === '1', trans[1] === '1'];
  const scale = (op: string | undefined) =>
    op === '1' ? 1 : op === '-1' ? -1 : fail(`imm-scale must be 1 or -1: ${line}`);
  const [negateA, negateB] = [scale(scaleA) < 0, scale(scaleB) < 0];
  const d = registerList(ctx, ops[0]!, n / 2, 'f32', true);
  const a = fromRegisters ? registerList(ctx, ops[1]!, 4, 'b32', false) : [src(ctx, 1, 'b64')];
  const b = src(ctx, 2, 'b64');
  const accumulate = /^[01]$/.test(scaleOp ?? '') ? Number(scaleOp) : -1;
  const accumulateSlot = accumulate < 0 ? src(ctx, 3, 'pred') : -1;
  return wholeWarp(line, (lanes) => {
    const first = lanes[0]!;
    // Descriptors and scale-d are the warpgroup's: every lane must give the same.
    const uniform = (slot: number) => {
      if (lanes.some((t) => t.u[slot] !== first.u[slot])) fail(`lanes disagree on an operand of ${line}`);
      return first.u[slot]!;
    };
    const descriptor = (slot: number): WgmmaDescriptor => {
      const d = decodeWgmmaDescriptor(uniform(slot), uniform(slot + 1));
      if (d.baseOffset !== 0) fail(`the interpreter models descriptors of base offset 0 only: ${line}`);
      return d;
    };
    const gather = (slots: readonly number[]) => {
      const words = new Uint32Array(32 * slots.length);
      gatherLanes(lanes, slots, words);
      return words;
    };
    const out = wgmmaWarp({
      type: type as 'bf16' | 'f16' | 'tf32',
      n,
      warp: first.warp & 3,
      a: fromRegisters ? gather(a) : descriptor(a[0]!),
      b: descriptor(b),
      d: gather(d),
      accumulate: accumulate < 0 ? uniform(accumulateSlot) !== 0 : accumulate === 1,
      negateA,
      negateB,
      transposeA,
      transposeB,
      half: (address) => {
        if (address + 2 > first.sharedBytes) outsideShared(line, address, 2, first.sharedBytes);
        return first.shared16[address >>> 1]!;
      },
      word: (address) => {
        if (address + 4 > first.sharedBytes) outsideShared(line, address, 4, first.sharedBytes);
        return (
          first.shared8[address]! |
          (first.shared8[address + 1]! << 8) |
          (first.shared8[address + 2]! << 16) |
          (first.shared8[address + 3]! << 24)
        );
      },
    });
    scatterLanes(lanes, d, out);
  });
}
