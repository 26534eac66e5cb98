import { gateUpSwiglu, InvalidArgumentError, rmsNormMatmul } from '@rayo/core';
import { type AnyCudaKernel, cudaKernel, elementPtr, type KernelEncoder, type Operand } from '../kernel.js';
import { PtxModule } from '../ptx/module.js';
import type { F32, R64 } from '../ptx/operands.js';
import { checkElementCount } from './common.js';
import { DOT_COLUMNS, loadOrZero, ROW_THREADS, streamLoop } from './gemv.js';
import { siluF32 } from './math.js';

// gateUpSwiglu as the GEMV's `dot` kernel over two weights at once: warp w
// of block x owns output column n = x · 8 + w, its lanes stream row n of
// both wGate and wUp along K (`.v4` through the non-coherent cache) with the
// same loads of x, and the warp's shuffle sums give both dot products, so
// the epilogue applies silu · mul and nothing else is written. The optional
// rmsNorm costs no pass of its own: each lane sums x² of the elements it
// already loaded, and the warp's total gives the row's inverse RMS, which
// scales both dot products (x̂·w = s · Σ (x · normWeight) · w).
// rmsNormMatmul is the same kernel over one weight, its epilogue the scale.

/** The most rows of x one block takes; blockIdx.y steps through more. */
export const FUSED_MAX_ROWS = 16;
export const FUSED_ENTRY = 'fused_norm_dot';

export interface FusedVariant {
  /** Two weights and silu · mul (gateUpSwiglu), or one weight and the plain product (rmsNormMatmul). */
  readonly gated: boolean;
  /** Rows of x per block, 1 to FUSED_MAX_ROWS. */
  readonly rows: number;
  /** `.v4` loads along K: K a multiple of 4 and every operand 16-byte aligned. */
  readonly vec: boolean;
  /** Folds rmsNorm(x, normWeight) into the dot products. */
  readonly norm: boolean;
}

export function fusedKey(v: FusedVariant): string {
  return `fused/${v.gated ? 'gateUpSwiglu' : 'rmsNormMatmul'}/m${v.rows}/${v.vec ? 'v4' : 'scalar'}${v.norm ? '/norm' : ''}`;
}

/**
 * Loop steps per iteration (weight loads in flight): each loads one or two
 * weight vectors and `rows` of x. Past 8 rows a block takes all the
 * registers (one block per SM), which leaves room for two steps again.
 */
function unrollFor(rows: number): number {
  return rows === 1 ? 4 : rows <= 4 || rows > 8 ? 2 : 1;
}

/** Blocks per SM the registers are planned for. */
function blocksPerSm(rows: number): number {
  return rows === 1 ? 4 : rows <= 8 ? 2 : 1;
}

export function fusedModule(v: FusedVariant): PtxModule {
  if (!Number.isInteger(v.rows) || v.rows < 1 || v.rows > FUSED_MAX_ROWS) {
    throw new InvalidArgumentError('a fused streaming block takes at most FUSED_MAX_ROWS rows', {
      kernel: v.gated ? 'gateUpSwiglu' : 'rmsNormMatmul',
      argument: 'rows',
      expected: `an integer from 1 to ${FUSED_MAX_ROWS}`,
      actual: String(v.rows),
    });
  }
  const w = v.vec ? 4 : 1;
  const m = new PtxModule();
  m.entry(
    FUSED_ENTRY,
    {
      x: 'ptr',
      wGate: 'ptr',
      wUp: 'ptr',
      normWeight: 'ptr',
      y: 'ptr',
      m: 'u32',
      n: 'u32',
      k: 'u32',
      eps: 'f32',
    },
    (k, p) => {
      const n = k.ldParam(p.n);
      const kDim = k.ldParam(p.k);
      const rowsTotal = k.ldParam(p.m);
      const tid = k.tid();
      const warp = k.shr('u32', k.reg('u32'), tid, 5);
      const lane = k.and('b32', k.reg('u32'), tid, 31);
      const col = k.madLo('u32', k.reg('u32'), k.ctaid(), DOT_COLUMNS, warp);
      // Whole warps leave together, so the shuffles below always see 32 lanes.
      k.guard(col, n, () => {
        const row0 = k.mulLo('u32', k.reg('u32'), k.ctaid('y'), v.rows);
        const lastRow = k.sub('u32', k.reg('u32'), rowsTotal, 1);
        const kIdx = k.mulLo('u32', k.reg('u32'), lane, w);
        const wOffset = k.madLo('u32', k.reg('u32'), col, kDim, kIdx);
        const gPtr = k.elementAddress(k.globalPointer(p.wGate), wOffset, 4);
        const uPtr = v.gated ? k.elementAddress(k.globalPointer(p.wUp), wOffset, 4) : undefined;
        const nPtr = v.norm ? k.elementAddress(k.globalPointer(p.normWeight), kIdx, 4) : undefined;
        const x = k.globalPointer(p.x);
        // Rows past M read the last row (never written), so every step loads alike.
        const xPtrs: R64[] = Array.from({ length: v.rows }, (_, r) => {
          const row = k.min('u32', k.reg('u32'), k.add('u32', k.reg('u32'), row0, r), lastRow);
          return k.elementAddress(x, k.madLo('u32', k.reg('u32'), row, kDim, kIdx), 4);
        });
        // A partial sum per vector element keeps the FMA chains short for one or two rows.
        const lanes = v.rows <= 2 ? w : 1;
        const zeros = (count: number) => {
          const regs = k.regs('f32', count);
          for (const r of regs) k.mov('f32', r, 0);
          return regs;
        };
        const gate = Array.from({ length: v.rows }, () => zeros(lanes));
        const up = Array.from({ length: v.rows }, () => zeros(v.gated ? lanes : 0));
        const squares = Array.from({ length: v.rows }, () => zeros(v.norm ? lanes : 0));
        const stride = 32 * w;
        const ptrs = [gPtr, ...(uPtr ? [uPtr] : []), ...(nPtr ? [nPtr] : []), ...xPtrs];
        streamLoop(k, kIdx, kDim, stride, unrollFor(v.rows), {
          load: () => {
            const load = (ptr: R64) => {
              const regs = k.regs('f32', w);
              loadOrZero(k, regs, ptr);
              return regs;
            };
            const g = load(gPtr);
            const u = uPtr ? load(uPtr) : undefined;
            const nv = nPtr ? load(nPtr) : undefined;
            const xv = xPtrs.map(load);
            for (const ptr of ptrs) k.add('u64', ptr, ptr, stride * 4);
            return { g, u, nv, xv };
          },
          use: ({ g, u, nv, xv }) => {
            xv.forEach((row, r) => {
              for (let j = 0; j < w; j++) {
                const slot = j % lanes;
                let xn: F32 = row[j]!;
                if (nv) {
                  const ss = squares[r]![slot]!;
                  k.fma('f32', ss, xn, xn, ss);
                  xn = k.mul('f32', k.reg('f32'), xn, nv[j]!, { rnd: 'rn' });
                }
                k.fma('f32', gate[r]![slot]!, xn, g[j]!, gate[r]![slot]!);
                if (u) k.fma('f32', up[r]![slot]!, xn, u[j]!, up[r]![slot]!);
              }
            });
          },
        });
        const warpSum = (parts: readonly F32[]): F32 => {
          const s = parts[0]!;
          for (let j = 1; j < parts.length; j++) k.add('f32', s, s, parts[j]!, { rnd: 'rn' });
          for (let offset = 16; offset >= 1; offset /= 2) {
            k.add('f32', s, s, k.shflSync('bfly', k.reg('f32'), s, offset), { rnd: 'rn' });
          }
          return s;
        };
        const gates = gate.map(warpSum);
        const ups = v.gated ? up.map(warpSum) : [];
        const sums = v.norm ? squares.map(warpSum) : [];
        const eps = v.norm ? k.ldParam(p.eps) : undefined;
        const count = v.norm ? k.cvt('f32', 'u32', k.reg('f32'), kDim, { rnd: 'rn' }) : undefined;
        const y = k.globalPointer(p.y);
        // Every lane holds every sum; lane r stores row r, so the stores go out in parallel.
        for (let r = 0; r < v.rows; r++) {
          const row = k.add('u32', k.reg('u32'), row0, r);
          const mine = k.setp('eq', 'u32', k.reg('pred'), lane, r);
          const inside = k.setp('lt', 'u32', k.reg('pred'), row, rowsTotal);
          k.ifThen(k.and('pred', k.reg('pred'), mine, inside), () => {
            let g = gates[r]!;
            let u = ups[r];
            if (v.norm) {
              // 1 / sqrt(mean(x²) + eps), IEEE square root and reciprocal as rmsNorm does.
              const t = k.div('f32', k.reg('f32'), sums[r]!, count!, 'rn');
              k.add('f32', t, t, eps!, { rnd: 'rn' });
              const s = k.rcp(k.reg('f32'), k.sqrt(k.reg('f32'), t, 'rn'), 'rn');
              g = k.mul('f32', k.reg('f32'), g, s, { rnd: 'rn' });
              if (u) u = k.mul('f32', k.reg('f32'), u, s, { rnd: 'rn' });
            }
            const out = u ? k.mul('f32', k.reg('f32'), siluF32(k, g), u, { rnd: 'rn' }) : g;
            const index = k.madLo('u32', k.reg('u32'), row, n, col);
            k.stGlobal('f32', k.elementAddress(y, index, 4), out);
          });
        }
      });
    },
    { maxThreadsPerBlock: ROW_THREADS, minBlocksPerSm: blocksPerSm(v.rows) },
  );
  return m;
}

/** `.v4` accesses need 16-byte alignment. */
const aligned16 = (ptr: bigint) => ptr % 16n === 0n;

interface FusedCall {
  readonly kernel: string;
  readonly x: Operand;
  readonly w: Operand;
  /** The up weight of gateUpSwiglu; absent for rmsNormMatmul. */
  readonly wUp: Operand | undefined;
  readonly normWeight: Operand | undefined;
  readonly y: Operand;
  readonly eps: number;
}

function encodeFused(encoder: KernelEncoder, call: FusedCall): void {
  const { x, w, wUp, normWeight, y } = call;
  if (y.size === 0) return;
  const [m, kDim] = x.shape as [number, number];
  const n = y.shape[1]!;
  checkElementCount(call.kernel, 'x', x.size);
  checkElementCount(call.kernel, 'w', w.size);
  checkElementCount(call.kernel, 'y', y.size);
  const operands = [x, w, ...(wUp ? [wUp] : []), ...(normWeight ? [normWeight] : [])];
  const vec = kDim % 4 === 0 && operands.every((o) => aligned16(o.ptr));
  const rows = Math.min(m, FUSED_MAX_ROWS);
  const variant = { gated: wUp !== undefined, rows, vec, norm: normWeight !== undefined };
  // Rows beyond the grid's y limit go in several launches.
  const perLaunch = encoder.device.maxGridDim[1] * rows;
  for (let first = 0; first < m; first += perLaunch) {
    const count = Math.min(perLaunch, m - first);
    encoder.launch({
      key: fusedKey(variant),
      module: () => fusedModule(variant),
      entry: FUSED_ENTRY,
      grid: [Math.ceil(n / DOT_COLUMNS), Math.ceil(count / rows), 1],
      block: ROW_THREADS,
      args: {
        x: elementPtr(x, first * kDim),
        wGate: w,
        // Unused by the variants without them; any valid address.
        wUp: wUp ?? w,
        normWeight: normWeight ?? w,
        y: elementPtr(y, first * n),
        m: count,
        n,
        k: kDim,
        eps: call.eps,
      },
    });
  }
}

export const FUSED_KERNELS: readonly AnyCudaKernel[] = [
  cudaKernel(gateUpSwiglu, (encoder, { inputs, outputs, attrs }) => {
    const [x, wGate, wUp, normWeight] = inputs;
    encodeFused(encoder, {
      kernel: gateUpSwiglu.name,
      x: x!,
      w: wGate!,
      wUp: wUp!,
      normWeight,
      y: outputs[0]!,
      eps: attrs.eps,
    });
  }),
  cudaKernel(rmsNormMatmul, (encoder, { inputs, outputs, attrs }) => {
    const [x, normWeight, w] = inputs;
    encodeFused(encoder, {
      kernel: rmsNormMatmul.name,
      x: x!,
      w: w!,
      wUp: undefined,
      normWeight: normWeight!,
      y: outputs[0]!,
      eps: attrs.eps,
    });
  }),
];
