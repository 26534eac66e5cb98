import {
  biasActivationBackward,
  type FusedLaunch,
  gateUpSwiglu,
  gateUpSwigluLaunch,
  InvalidArgumentError,
  type LinearActivation,
  linear,
  linearLaunch,
  rmsNormMatmul,
  rmsNormMatmul3,
  rmsNormMatmul3Launch,
  rmsNormMatmulLaunch,
} from '@rayo/core';
import {
  type AnyCudaKernel,
  cudaKernel,
  elementPtr,
  type KernelEncoder,
  launchedKernel,
  type Operand,
} from '../kernel.js';
import { PtxModule } from '../ptx/module.js';
import { addr, type F32, type Pred, type R32, type R64 } from '../ptx/operands.js';
import { activationF32, activationGradF32 } from './activations.js';
import { checkElementCount } from './common.js';
import { loadParams } from './entryParams.js';
import {
  ROW_THREADS,
  type StreamSlices,
  slicedWarpColumn,
  sliceSum,
  streamLoop,
  streamSlicesFor,
  streamWidth,
  warpSum,
} from './gemv.js';
import { encodeMatmul, HALF_STORAGE } from './matmul.js';
import { encodeGatedWgmma, gatedWgmmaApplies } from './matmulWgmmaGated.js';
import {
  type FloatStorage,
  loadAsF32,
  loadOneAsF32,
  STORAGE_BYTES,
  storageKey,
  storageOf,
  storeFromF32,
} from './storage.js';

// gateUpSwiglu as the GEMV's `dot` kernel over two weights at once: warp w
// of block x owns output column n = x · 8 + w, its lanes stream row n of
// both wGate and wUp along K (`.v4` through the non-coherent cache) with the
// same loads of x, and the warp's shuffle sums give both dot products, so
// the epilogue applies silu · mul and nothing else is written. The optional
// rmsNorm costs no pass of its own: each lane sums x² of the elements it
// already loaded, and the warp's total gives the row's inverse RMS, which
// scales both dot products (x̂·w = s · Σ (x · normWeight) · w).
// rmsNormMatmul is the same kernel over one weight, its epilogue the scale;
// rmsNormMatmul3 runs it over the rows of two or three weights at once (q, k
// and v), each warp picking its weight, row and output from its column, so
// the small weights share one launch with the large one instead of each
// leaving most of the GPU idle.

/** The most rows of x one block takes; blockIdx.y steps through more. */
export const FUSED_MAX_ROWS = 16;
export const FUSED_ENTRY = 'fused_norm_dot';

export interface FusedVariant {
  /** Two weights and silu · mul (gateUpSwiglu), or one weight and the plain product (rmsNormMatmul). */
  readonly gated: boolean;
  /** Ungated only: weights whose rows the columns span, each with its own output (rmsNormMatmul3); 1 when absent. */
  readonly weights?: number;
  /** Rows of x per block, 1 to FUSED_MAX_ROWS. */
  readonly rows: number;
  /** `.v4` loads along K: K a multiple of 4 and every operand 16-byte aligned. */
  readonly vec: boolean;
  /** Folds rmsNorm(x, normWeight) into the dot products. */
  readonly norm: boolean;
  /** Storage of x, normWeight and the outputs (`act`) and of the weights; all f32 when absent. */
  readonly types?: { readonly act: FloatStorage; readonly weight: FloatStorage };
  /** Warps a column's K is split between (1 when absent): see streamSlicesFor. */
  readonly slices?: StreamSlices;
}

const weightCount = (v: FusedVariant) => v.weights ?? 1;

function kernelName(v: FusedVariant): string {
  return v.gated
    ? 'gateUpSwiglu'
    : weightCount(v) > 1
      ? `rmsNormMatmul3/w${weightCount(v)}`
      : 'rmsNormMatmul';
}

export function fusedKey(v: FusedVariant): string {
  const types = v.types ? storageKey([v.types.act, v.types.weight]) : '';
  const sliced = (v.slices ?? 1) > 1 ? `/s${v.slices}` : '';
  return `fused/${kernelName(v)}/m${v.rows}/${v.vec ? 'v4' : 'scalar'}${v.norm ? '/norm' : ''}${sliced}${types}`;
}

/** Output columns a block of the variant computes. */
export function fusedColumns(v: Pick<FusedVariant, 'slices'>): number {
  return ROW_THREADS / 32 / (v.slices ?? 1);
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

/** Loop steps in flight: vectors of 8 halves take as many registers a step as 4 f32, so half the steps. */
function fusedUnroll(v: Pick<FusedVariant, 'rows' | 'vec' | 'types'>): number {
  const w = v.vec ? streamWidth(v.types?.weight ?? 'f32', v.rows) : 1;
  return Math.max(1, (unrollFor(v.rows) * 4) / Math.max(w, 4));
}

export function fusedModule(v: FusedVariant): PtxModule {
  if (!Number.isInteger(v.rows) || v.rows < 1 || v.rows > FUSED_MAX_ROWS) {
    throw new InvalidArgumentError('a fused streaming block takes at most FUSED_MAX_ROWS rows', {
      operation: v.gated ? 'gateUpSwiglu' : 'rmsNormMatmul',
      argument: 'rows',
      expected: `an integer from 1 to ${FUSED_MAX_ROWS}`,
      actual: String(v.rows),
    });
  }
  const weights = weightCount(v);
  if (!Number.isInteger(weights) || weights < 1 || weights > 3 || (v.gated && weights > 1)) {
    throw new InvalidArgumentError('a fused streaming block spans one to three ungated weights', {
      operation: 'rmsNormMatmul3',
      argument: 'weights',
      expected: v.gated ? '1 with gateUpSwiglu' : 'an integer from 1 to 3',
      actual: String(weights),
    });
  }
  const { act, weight } = v.types ?? { act: 'f32', weight: 'f32' };
  const w = v.vec ? streamWidth(weight, v.rows) : 1;
  const unroll = fusedUnroll(v);
  const slices = v.slices ?? 1;
  const actBytes = STORAGE_BYTES[act];
  const weightBytes = STORAGE_BYTES[weight];
  const m = new PtxModule();
  m.entry(
    FUSED_ENTRY,
    {
      x: 'ptr',
      wGate: 'ptr',
      wUp: 'ptr',
      normWeight: 'ptr',
      y: 'ptr',
      // The second and third weights and outputs of rmsNormMatmul3, and where
      // their columns start; the other variants ignore them.
      w1: 'ptr',
      w2: 'ptr',
      y1: 'ptr',
      y2: 'ptr',
      n0: 'u32',
      n1: 'u32',
      m: 'u32',
      n: 'u32',
      k: 'u32',
      eps: 'f32',
    },
    (k, p) => {
      const { n, k: kDim, m: rowsTotal } = loadParams(k, p, 'n', 'k', 'm');
      const at = slicedWarpColumn(k, slices);
      const { lane, slice } = at;
      // The body for column `col`; `inside` (split K only) says whether it is a real column.
      const body = (col: R32, inside: Pred | undefined) => {
        const row0 = k.mulLo('u32', k.reg('u32'), k.ctaid('y'), v.rows);
        const lastRow = k.sub('u32', k.reg('u32'), rowsTotal, 1);
        // Lane l of slice s starts at k = (32s + l) · w and steps by 32 · slices · w.
        const kIdx = k.mulLo('u32', k.reg('u32'), at.piece, w);
        // Which weight, row and output this column is; the warp's lanes agree.
        let wBase = k.globalPointer(p.wGate);
        let yBase = k.globalPointer(p.y);
        let wRow: typeof col = col;
        let yCols: typeof n = n;
        if (weights > 1) {
          const starts = [k.ldParam(p.n0)];
          if (weights > 2) starts.push(k.add('u32', k.reg('u32'), starts[0]!, k.ldParam(p.n1)));
          const ends = [...starts, n];
          yCols = starts[0]!;
          const ws = [k.globalPointer(p.w1), k.globalPointer(p.w2)];
          const ys = [k.globalPointer(p.y1), k.globalPointer(p.y2)];
          starts.forEach((start, i) => {
            const past = k.setp('ge', 'u32', k.reg('pred'), col, start);
            wRow = k.selp('u32', k.reg('u32'), k.sub('u32', k.reg('u32'), col, start), wRow, past);
            yCols = k.selp('u32', k.reg('u32'), k.sub('u32', k.reg('u32'), ends[i + 1]!, start), yCols, past);
            wBase = k.selp('u64', k.reg('u64'), ws[i]!, wBase, past);
            yBase = k.selp('u64', k.reg('u64'), ys[i]!, yBase, past);
          });
        }
        const wOffset = k.madLo('u32', k.reg('u32'), wRow, kDim, kIdx);
        const gPtr = k.elementAddress(wBase, wOffset, weightBytes);
        const uPtr = v.gated ? k.elementAddress(k.globalPointer(p.wUp), wOffset, weightBytes) : undefined;
        const nPtr = v.norm ? k.elementAddress(k.globalPointer(p.normWeight), kIdx, actBytes) : undefined;
        const x = k.globalPointer(p.x);
        // Rows past M read the last row (never written), so every step loads alike.
        const xPtrs: R64[] = Array.from({ length: v.rows }, (_, r) => {
          const row = k.min('u32', k.reg('u32'), k.add('u32', k.reg('u32'), row0, r), lastRow);
          return k.elementAddress(x, k.madLo('u32', k.reg('u32'), row, kDim, kIdx), actBytes);
        });
        // A partial sum per vector element (up to 4) keeps the FMA chains short for one or two rows.
        const lanes = v.rows <= 2 ? Math.min(w, 4) : 1;
        const zeros = (count: number) => {
          const regs = k.regs('f32', count);
          for (const r of regs) k.mov('f32', r, 0);
          return regs;
        };
        const gate = Array.from({ length: v.rows }, () => zeros(lanes));
        const up = Array.from({ length: v.rows }, () => zeros(v.gated ? lanes : 0));
        const squares = Array.from({ length: v.rows }, () => zeros(v.norm ? lanes : 0));
        const stride = 32 * w * slices;
        const weightPtrs = [gPtr, ...(uPtr ? [uPtr] : [])];
        const actPtrs = [...(nPtr ? [nPtr] : []), ...xPtrs];
        streamLoop(k, kIdx, kDim, stride, unroll, {
          load: () => {
            const load = (type: FloatStorage) => (ptr: R64) => {
              const regs = k.regs('f32', w);
              loadAsF32(k, type, regs, ptr);
              return regs;
            };
            const g = load(weight)(gPtr);
            const u = uPtr ? load(weight)(uPtr) : undefined;
            const nv = nPtr ? load(act)(nPtr) : undefined;
            const xv = xPtrs.map(load(act));
            for (const ptr of weightPtrs) k.add('u64', ptr, ptr, stride * weightBytes);
            for (const ptr of actPtrs) k.add('u64', ptr, ptr, stride * actBytes);
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
        const gates = gate.map((parts) => warpSum(k, parts));
        const ups = v.gated ? up.map((parts) => warpSum(k, parts)) : [];
        const sums = v.norm ? squares.map((parts) => warpSum(k, parts)) : [];
        sliceSum(k, [...gates, ...ups, ...sums], { ...at, slices });
        const stores = inside
          ? k.and('pred', k.reg('pred'), inside, k.setp('eq', 'u32', k.reg('pred'), slice, 0))
          : undefined;
        const eps = v.norm ? k.ldParam(p.eps) : undefined;
        const count = v.norm ? k.cvt('f32', 'u32', k.reg('f32'), kDim, { rnd: 'rn' }) : undefined;
        // Every lane holds every sum; lane r stores row r, so the stores go out in parallel.
        for (let r = 0; r < v.rows; r++) {
          const row = k.add('u32', k.reg('u32'), row0, r);
          const mine = k.setp('eq', 'u32', k.reg('pred'), lane, r);
          const rowInside = k.setp('lt', 'u32', k.reg('pred'), row, rowsTotal);
          const store = k.and('pred', k.reg('pred'), mine, rowInside);
          k.ifThen(stores ? k.and('pred', store, store, stores) : store, () => {
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
            const out = u ? k.mul('f32', k.reg('f32'), activationF32(k, 'silu', g), u, { rnd: 'rn' }) : g;
            const index = k.madLo('u32', k.reg('u32'), row, yCols, wRow);
            storeFromF32(k, act, k.elementAddress(yBase, index, actBytes), out);
          });
        }
      };
      if (slices === 1) {
        // Whole warps leave together, so the shuffles below always see 32 lanes.
        k.guard(at.col, n, () => body(at.col, undefined));
      } else {
        // Split K sums across warps at a barrier, so no warp leaves: a column past N reads column N − 1 and stores nothing.
        const inside = k.setp('lt', 'u32', k.reg('pred'), at.col, n);
        body(k.min('u32', k.reg('u32'), at.col, k.sub('u32', k.reg('u32'), n, 1)), inside);
      }
    },
    { maxThreadsPerBlock: ROW_THREADS, minBlocksPerSm: blocksPerSm(v.rows) },
  );
  return m;
}

/** `.v4` accesses need 16-byte alignment. */
const aligned16 = (ptr: bigint) => ptr % 16n === 0n;

interface FusedCall extends FusedLaunch<Operand> {
  readonly kernel: string;
}

function encodeFused(encoder: KernelEncoder, call: FusedCall): void {
  const { x, w, wUp, normWeight, y } = call;
  const [m, kDim] = x.shape as [number, number];
  const cols = y.map((o) => o.shape[1]!);
  const n = cols.reduce((a, b) => a + b, 0);
  if (m === 0 || n === 0) return;
  checkElementCount(call.kernel, 'x', x.size);
  for (const [i, o] of w.entries()) checkElementCount(call.kernel, w.length > 1 ? `w${i}` : 'w', o.size);
  for (const [i, o] of y.entries()) checkElementCount(call.kernel, y.length > 1 ? `y${i}` : 'y', o.size);
  const operands = [x, ...w, ...(wUp ? [wUp] : []), ...(normWeight ? [normWeight] : [])];
  const rows = Math.min(m, FUSED_MAX_ROWS);
  const types = { act: storageOf(x), weight: storageOf(w[0]!) };
  const vec = kDim % streamWidth(types.weight, rows) === 0 && operands.every((o) => aligned16(o.ptr));
  const shape = {
    gated: wUp !== undefined,
    weights: w.length,
    rows,
    vec,
    norm: normWeight !== undefined,
    ...(types.act === 'f32' && types.weight === 'f32' ? {} : { types }),
  };
  const width = vec ? streamWidth(types.weight, rows) : 1;
  // One row of x only by default: batched rows keep the layout their registers were planned for.
  const slices =
    rows === 1 || encoder.tuning.gemvSlices !== undefined
      ? streamSlicesFor(
          {
            k: kDim,
            width,
            unroll: fusedUnroll(shape),
            columns: n * Math.ceil(m / rows),
            residentBlocks: blocksPerSm(rows) * encoder.device.multiprocessors,
          },
          encoder.tuning.gemvSlices,
        )
      : 1;
  const variant: FusedVariant = slices > 1 ? { ...shape, slices } : shape;
  // Rows beyond the grid's y limit go in several launches.
  const perLaunch = encoder.device.maxGridDim[1] * rows;
  for (let first = 0; first < m; first += perLaunch) {
    const count = Math.min(perLaunch, m - first);
    const out = y.map((o, i) => elementPtr(o, first * cols[i]!));
    encoder.launch({
      key: fusedKey(variant),
      module: () => fusedModule(variant),
      entry: FUSED_ENTRY,
      grid: [Math.ceil(n / fusedColumns(variant)), Math.ceil(count / rows), 1],
      block: ROW_THREADS,
      args: {
        x: elementPtr(x, first * kDim),
        wGate: w[0]!,
        // Unused by the variants without them; any valid address.
        wUp: wUp ?? w[0]!,
        normWeight: normWeight ?? w[0]!,
        y: out[0]!,
        w1: w[1] ?? w[0]!,
        w2: w[2] ?? w[0]!,
        y1: out[1] ?? out[0]!,
        y2: out[2] ?? out[0]!,
        n0: cols[0]!,
        n1: cols[1] ?? 0,
        m: count,
        n,
        k: kDim,
        eps: call.eps,
      },
    });
  }
}

// ---- linear's backward: dz and the bias gradient in one pass --------------------

export const BIAS_ACTIVATION_ENTRY = 'bias_activation_backward';
/** Columns per block: a warp's row of dy is 128 contiguous bytes. */
export const BIAS_ACTIVATION_COLUMNS = 32;
const BIAS_ACTIVATION_WARPS = 8;

export function biasActivationKey(activation: LinearActivation, type: FloatStorage = 'f32'): string {
  return `fused/biasActivationBackward/${activation}${storageKey([type])}`;
}

/**
 * dz = dy · act'(z) and db = Σ_rows dz: block x owns columns
 * [32x, 32x + 32), lane l column 32x + l and warp w rows w, w + 8, …, so
 * each warp reads whole rows of 128 bytes; every thread keeps its column's
 * running sum, and warp 0 adds the 8 warps' sums in warp order (the same
 * result every run) and writes db.
 */
export function biasActivationModule(activation: LinearActivation, type: FloatStorage = 'f32'): PtxModule {
  const bytes = STORAGE_BYTES[type];
  const m = new PtxModule();
  m.entry(
    BIAS_ACTIVATION_ENTRY,
    { dy: 'ptr', z: 'ptr', dz: 'ptr', db: 'ptr', m: 'u32', n: 'u32' },
    (k, p) => {
      const { m: rows, n, dy, z, dz } = loadParams(k, p, 'm', 'n', 'dy', 'z', 'dz');
      const partial = k.sharedArray('partial', 'f32', BIAS_ACTIVATION_WARPS * BIAS_ACTIVATION_COLUMNS, 4);
      const tid = k.tid();
      const warp = k.shr('u32', k.reg('u32'), tid, 5);
      const lane = k.and('b32', k.reg('u32'), tid, 31);
      const col = k.madLo('u32', k.reg('u32'), k.ctaid(), BIAS_ACTIVATION_COLUMNS, lane);
      const sum = k.mov('f32', k.reg('f32'), 0);
      k.ifThen(k.setp('lt', 'u32', k.reg('pred'), col, n), () => {
        const row = k.reg('u32');
        k.forRange(row, warp, rows, BIAS_ACTIVATION_WARPS, () => {
          const index = k.madLo('u32', k.reg('u32'), row, n, col);
          const g = loadOneAsF32(k, type, k.elementAddress(dy, index, bytes));
          if (activation !== 'none') {
            const zv = loadOneAsF32(k, type, k.elementAddress(z, index, bytes));
            k.mul('f32', g, g, activationGradF32(k, activation, zv), { rnd: 'rn' });
          }
          // db sums the f32 values; dz is rounded only as it is stored.
          storeFromF32(k, type, k.elementAddress(dz, index, bytes), g);
          k.add('f32', sum, sum, g, { rnd: 'rn' });
        });
      });
      const base = k.sharedAddress(partial);
      k.stShared('f32', k.madLo('u32', k.reg('u32'), tid, 4, base), sum);
      k.barSync();
      const first = k.and(
        'pred',
        k.reg('pred'),
        k.setp('eq', 'u32', k.reg('pred'), warp, 0),
        k.setp('lt', 'u32', k.reg('pred'), col, n),
      );
      k.ifThen(first, () => {
        const at = k.madLo('u32', k.reg('u32'), lane, 4, base);
        const total = k.ldShared('f32', k.reg('f32'), at);
        for (let w = 1; w < BIAS_ACTIVATION_WARPS; w++) {
          const part = k.ldShared('f32', k.reg('f32'), addr(at, w * BIAS_ACTIVATION_COLUMNS * 4));
          k.add('f32', total, total, part, { rnd: 'rn' });
        }
        storeFromF32(k, type, k.elementAddress(k.globalPointer(p.db), col, bytes), total);
      });
    },
    { maxThreadsPerBlock: BIAS_ACTIVATION_WARPS * 32 },
  );
  return m;
}

export const FUSED_KERNELS: readonly AnyCudaKernel[] = [
  launchedKernel(linear, linearLaunch, encodeMatmul, HALF_STORAGE),
  cudaKernel(
    biasActivationBackward,
    (encoder, { inputs, outputs, attrs }) => {
      const [dy, z] = inputs;
      const [dz, db] = outputs;
      const [m, n] = dy!.shape as [number, number];
      if (n === 0) return;
      checkElementCount(biasActivationBackward.name, 'dy', dy!.size);
      const { activation } = attrs;
      const type = storageOf(dy!);
      encoder.launch({
        key: biasActivationKey(activation, type),
        module: () => biasActivationModule(activation, type),
        entry: BIAS_ACTIVATION_ENTRY,
        grid: Math.ceil(n / BIAS_ACTIVATION_COLUMNS),
        block: BIAS_ACTIVATION_WARPS * 32,
        // Without an activation z is never read.
        args: { dy: dy!.ptr, z: (z ?? dy!).ptr, dz: dz!.ptr, db: db!.ptr, m, n },
      });
    },
    HALF_STORAGE,
  ),
  launchedKernel(
    gateUpSwiglu,
    gateUpSwigluLaunch,
    (encoder, call) =>
      gatedWgmmaApplies(encoder, call) ? encodeGatedWgmma(encoder, call) : encodeFused(encoder, call),
    HALF_STORAGE,
  ),
  launchedKernel(rmsNormMatmul, rmsNormMatmulLaunch, encodeFused, HALF_STORAGE),
  launchedKernel(rmsNormMatmul3, rmsNormMatmul3Launch, encodeFused, HALF_STORAGE),
];
