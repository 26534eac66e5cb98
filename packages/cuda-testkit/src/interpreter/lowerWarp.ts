import { popcount32 } from './intMath.js';
import { type Context, dst, type Lowered, src, stop, unsupported } from './lowering.js';
import { INACTIVE_LANE_VALUE, WARP, type WarpSite } from './threads.js';

// Warp-synchronous instructions: bar.warp.sync, shfl.sync and vote.sync.

export function lowerWarpSync(ctx: Context): Lowered {
  if (ctx.ins.parts.join('.') !== 'bar.warp.sync') unsupported(ctx);
  const mask = src(ctx, 0, 'b32');
  const site: WarpSite = { line: ctx.ins.line, complete: () => {} };
  return stop((u, _f, t) => {
    t.site = site;
    t.mask = u[mask]!;
    return WARP;
  });
}

/** `shfl.sync.mode.b32 d{|p}, a, b, c, membermask`, with PTX's lane arithmetic. */
export function lowerShfl(ctx: Context): Lowered {
  const { parts, ops, line } = ctx.ins;
  const mode = parts[2]!;
  if (parts.length !== 4 || parts[1] !== 'sync' || parts[3] !== 'b32') unsupported(ctx);
  if (!['up', 'down', 'bfly', 'idx'].includes(mode)) unsupported(ctx);
  const [dOp, pOp] = ops[0]!.split('|') as [string, string | undefined];
  const d = ctx.layout.dest(dOp, 32, line);
  const p = pOp === undefined ? -1 : ctx.layout.dest(pOp, 1, line);
  const a = src(ctx, 1, 'b32');
  const b = src(ctx, 2, 'u32');
  const c = src(ctx, 3, 'b32');
  const mask = src(ctx, 4, 'b32');
  const values = new Uint32Array(32);
  const inRange = new Uint8Array(32);
  const site: WarpSite = {
    line,
    complete: (lanes) => {
      // Every lane reads its source before any destination is written (d may be a).
      for (let lane = 0; lane < 32; lane++) {
        const t = lanes[lane];
        if (!t) continue;
        const bval = t.op1 & 31;
        const clamp = t.op2 & 31;
        const segmask = (t.op2 >>> 8) & 31;
        const maxLane = (lane & segmask) | (clamp & ~segmask);
        const minLane = lane & segmask;
        let j: number;
        let ok: boolean;
        switch (mode) {
          case 'up':
            j = lane - bval;
            ok = j >= maxLane;
            break;
          case 'down':
            j = lane + bval;
            ok = j <= maxLane;
            break;
          case 'bfly':
            j = lane ^ bval;
            ok = j <= maxLane;
            break;
          default:
            j = minLane | (bval & ~segmask);
            ok = j <= maxLane;
        }
        if (!ok) j = lane;
        const source = lanes[j];
        values[lane] = source ? source.op0 : INACTIVE_LANE_VALUE;
        inRange[lane] = ok ? 1 : 0;
      }
      for (let lane = 0; lane < 32; lane++) {
        const t = lanes[lane];
        if (!t) continue;
        t.u[d] = values[lane]!;
        if (p >= 0) t.u[p] = inRange[lane]!;
      }
    },
  };
  return stop((u, _f, t) => {
    t.site = site;
    t.mask = u[mask]!;
    t.op0 = u[a]!;
    t.op1 = u[b]!;
    t.op2 = u[c]!;
    return WARP;
  });
}

/** `vote.sync.ballot.b32 d, p, membermask` and `vote.sync.{any,all,uni}.pred d, p, membermask`. */
export function lowerVote(ctx: Context): Lowered {
  const { parts } = ctx.ins;
  const mode = parts[2]!;
  const type = parts[3]!;
  const ok =
    parts.length === 4 &&
    parts[1] === 'sync' &&
    (mode === 'ballot' ? type === 'b32' : ['any', 'all', 'uni'].includes(mode) && type === 'pred');
  if (!ok) unsupported(ctx);
  const d = dst(ctx, 0, type);
  const p = src(ctx, 1, 'pred');
  const mask = src(ctx, 2, 'b32');
  const site: WarpSite = {
    line: ctx.ins.line,
    complete: (lanes) => {
      let ballot = 0;
      let arrived = 0;
      for (const t of lanes) {
        if (!t) continue;
        arrived++;
        if (t.op0) ballot |= 1 << t.lane;
      }
      const ones = popcount32(ballot);
      const result =
        mode === 'ballot'
          ? ballot >>> 0
          : mode === 'any'
            ? Number(ones > 0)
            : mode === 'all'
              ? Number(ones === arrived)
              : Number(ones === 0 || ones === arrived);
      for (const t of lanes) if (t) t.u[d] = result;
    },
  };
  return stop((u, _f, t) => {
    t.site = site;
    t.mask = u[mask]!;
    t.op0 = u[p]!;
    return WARP;
  });
}
