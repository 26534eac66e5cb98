import type { MatmulTile } from '@rayo/core';
import { bindingType, loadScalar, quadType, type Storage, unpackQuad } from '../wgsl/half.js';
import { ShaderModule } from '../wgsl/module.js';
import {
  declareBindings,
  decodeWorkgroup,
  doubleBufferedKLoop,
  emitFunctions,
  type OperandReads,
  outputKey,
  storageKey,
} from './matmulWgsl.js';

// The tiled matrix product: register-blocked GEMM with double-buffered
// workgroup tiles, vec4 global and workgroup loads, transposes baked into the
// loaders. A half b (weight-only half) is widened as it is loaded into
// registers: vec4 loads become two u32 words of four halves.

export const TILE_LARGE: MatmulTile = { bm: 128, bn: 128, bk: 8, tm: 8, tn: 8 };
export const TILE_MID: MatmulTile = { bm: 64, bn: 64, bk: 16, tm: 4, tn: 4 };

const threadsOf = (t: MatmulTile) => (t.bm / t.tm) * (t.bn / t.tn);

/** Bytes of workgroup memory: two buffers of each operand's tile. */
export const tileBytes = (t: MatmulTile) => 2 * t.bk * (t.bm + t.bn) * 4;

/**
 * One operand as the tile loader sees it: its tile spans `width` rows of
 * op(x) (M for a, N for b) and BK of K. `wide` storage is contiguous along the
 * tile's width ([K, M] a, [K, N] b); `deep` storage along K ([M, K] a, [N, K] b).
 */
interface TileOperand {
  /** Its role in the tile: 'a' spans the tile's rows, 'b' its columns. */
  readonly name: 'a' | 'b';
  /** The binding it is read from (the roles swap for aᵀ·bᵀ). */
  readonly source: 'a' | 'b';
  readonly wide: boolean;
  readonly vec: boolean;
  /** How its binding stores elements (f32, or halves in u32 words). */
  readonly storage: Storage;
  readonly width: number;
  /** WGSL: the operand's extent along the tile width, and its first row in this tile. */
  readonly dim: string;
  readonly origin: string;
}

/**
 * Global → register → workgroup staging of one operand. Registers are filled
 * for the next K step while the current one is multiplied. Each thread's
 * slots are fixed, so their coordinates are computed once (`setup`).
 * Workgroup tiles are always [BK][width] (K-major) so that the compute stage
 * reads vec4s along M and N; deep operands are transposed on the store.
 * Their vec4 loads put neighbouring threads along K, reading whole sectors of
 * a row; on an H100 that beat one thread per row (conflict-free stores, but
 * half-used sectors) by a third.
 */
function tileLoader(op: TileOperand, tile: MatmulTile) {
  const threads = threadsOf(tile);
  const w4 = op.width / 4;
  const per = (tile.bk * op.width) / threads / (op.vec ? 4 : 1);
  if (!Number.isInteger(per) || per < 1)
    throw new Error(`tile ${JSON.stringify(tile)} leaves threads without a load`);
  const shared = `tile_${op.name}`;
  const base = `${op.source}Base`;
  const reg = (j: number) => `${op.name}_r${j}`;
  const at = (j: number, v: string) => `${op.name}_${v}${j}`;
  const slots = Array.from({ length: per }, (_, j) => j);
  const zero = op.vec ? 'vec4<f32>()' : '0.0';
  const index = (gw: string, gk: string) =>
    op.wide ? `${base} + ${gk} * ${op.dim} + ${gw}` : `${base} + ${gw} * params.k + ${gk}`;

  // Coordinates inside the tile: `w` along the width, `k` along BK.
  const setup = slots
    .map((j) => {
      const idx = `tid + ${j * threads}u`;
      if (op.vec && op.wide)
        return `let ${at(j, 'w')} = (${idx}) % ${w4}u * 4u; let ${at(j, 'k')} = (${idx}) / ${w4}u;`;
      // Deep vec4 loads: threads side by side along K read a row's BK floats together.
      if (op.vec)
        return `let ${at(j, 'w')} = (${idx}) / ${tile.bk / 4}u; let ${at(j, 'k')} = (${idx}) % ${tile.bk / 4}u * 4u;`;
      if (op.wide)
        return `let ${at(j, 'w')} = (${idx}) % ${op.width}u; let ${at(j, 'k')} = (${idx}) / ${op.width}u;`;
      // Scalar deep loads run along K for coalescing.
      return `let ${at(j, 'w')} = (${idx}) / ${tile.bk}u; let ${at(j, 'k')} = (${idx}) % ${tile.bk}u;`;
    })
    .join('\n  ');

  const declare = slots.map((j) => `var ${reg(j)}: ${op.vec ? 'vec4<f32>' : 'f32'};`).join('\n  ');

  const read = (idx: string) =>
    op.vec ? unpackQuad(op.storage, `${op.source}[(${idx}) / 4u]`) : loadScalar(op.storage, op.source, idx);

  /** WGSL: fills the registers with the tile at K offset `k0`, zero outside the operand. */
  const load = (k0: string) =>
    slots
      .map((j) => {
        const gw = `${op.origin} + ${at(j, 'w')}`;
        const gk = `${k0} + ${at(j, 'k')}`;
        const idx = index('gw', 'gk');
        return `{
      let gw = ${gw};
      let gk = ${gk};
      ${reg(j)} = ${zero};
      if (gw < ${op.dim} && gk < kEnd) { ${reg(j)} = ${read(idx)}; }
    }`;
      })
      .join('\n    ');

  /** WGSL: stores the registers into workgroup buffer `buf` (a vec4 offset). */
  const store = (buf: string) =>
    slots
      .map((j) => {
        const w = at(j, 'w');
        const k = at(j, 'k');
        if (op.vec && op.wide) return `${shared}[${buf} + ${k} * ${w4}u + ${w} / 4u] = ${reg(j)};`;
        if (op.vec) {
          return ['x', 'y', 'z', 'w']
            .map(
              (c, i) =>
                `${shared}[${buf} + (${k} + ${i}u) * ${w4}u + ${w} / 4u][${w} % 4u] = ${reg(j)}.${c};`,
            )
            .join('\n    ');
        }
        return `${shared}[${buf} + ${k} * ${w4}u + ${w} / 4u][${w} % 4u] = ${reg(j)};`;
      })
      .join('\n    ');

  return { setup, declare, load, store, size: tile.bk * w4 };
}

/**
 * The multiply of one workgroup tile, unrolled over BK (a loop here ran at
 * half the speed: the driver neither unrolled it nor kept the accumulators
 * in registers as well). Per K step, TM/4 vec4s of a and TN/4 of b from
 * workgroup memory feed TM·TN/4 vec4 FMAs into named accumulators. A
 * thread's rows are TM/4 groups of 4 spaced BM/(TM/4) apart (same for
 * columns), so a warp's vec4 reads of b hit consecutive addresses (no bank
 * conflicts) and its reads of a are broadcasts.
 */
function tileCompute(tile: MatmulTile, bufA: string, bufB: string): string {
  const step = (kk: number) => {
    const lines: string[] = [];
    for (let g = 0; g < tile.tm / 4; g++) {
      lines.push(`let fa${g} = tile_a[${bufA} + ${kk * (tile.bm / 4) + g * (tile.bm / tile.tm)}u + tm];`);
    }
    for (let g = 0; g < tile.tn / 4; g++) {
      lines.push(`let fb${g} = tile_b[${bufB} + ${kk * (tile.bn / 4) + g * (tile.bn / tile.tn)}u + tn];`);
    }
    for (let i = 0; i < tile.tm; i++) {
      const a = `vec4<f32>(fa${Math.floor(i / 4)}.${'xyzw'[i % 4]})`;
      for (let g = 0; g < tile.tn / 4; g++) lines.push(`acc${i}_${g} = fma(${a}, fb${g}, acc${i}_${g});`);
    }
    return lines.join('\n      ');
  };
  return Array.from({ length: tile.bk }, (_, kk) => `{\n      ${step(kk)}\n    }`).join('\n    ');
}

/** Writes the micro-tile through emit4, or element by element into yᵀ when swapped. */
function tileEpilogue(tile: MatmulTile, swap: boolean): string {
  const lines: string[] = [];
  const rowStride = (tile.bm / tile.tm) * 4;
  const colStride = (tile.bn / tile.tn) * 4;
  for (let i = 0; i < tile.tm; i++) {
    const row = `m0 + ${Math.floor(i / 4) * rowStride + (i % 4)}u + tm * 4u`;
    const emits = Array.from({ length: tile.tn / 4 }, (_, g) => {
      const col = `n0 + ${g * colStride}u + tn * 4u`;
      if (!swap) return `emit4(yBase + row * params.n + ${col}, ${col}, acc${i}_${g}, yOff);`;
      return `for (var j = 0u; j < 4u; j++) {
      let col = ${col} + j;
      if (col < params.m) { emit1(yBase + col * params.n + row, acc${i}_${g}[j], yOff); }
    }`;
    });
    lines.push(`{ let row = ${row}; if (row < ${swap ? 'params.n' : 'params.m'}) { ${emits.join(' ')} } }`);
  }
  return lines.join('\n  ');
}

export interface TileVariant extends OperandReads {
  readonly tile: MatmulTile;
  /**
   * Computes yᵀ = op(b)ᵀ·op(a)ᵀ instead: for aᵀ·bᵀ this turns two K-major
   * operands into the b-then-a pair the loaders handle fastest.
   */
  readonly swap: boolean;
}

/** Consecutive tile rows that share columns of b, for L2 reuse. */
const SWIZZLE = 8;

export function tileShader(v: TileVariant, kernel: string) {
  const { tile } = v;
  const threads = threadsOf(tile);
  const key = [
    'matmul',
    `tile${tile.bm}x${tile.bn}x${tile.bk}`,
    `t${tile.tm}x${tile.tn}`,
    `tA${+v.transA}tB${+v.transB}${v.swap ? 'swap' : ''}`,
    `a${v.vecA ? 4 : 1}b${v.vecB ? 4 : 1}${storageKey(v.b)}`,
    outputKey(v.out),
  ].join('/');
  const code = () => {
    // Swapped, the tile rows run along N (b, [N, K]) and its columns along M (a, [K, M]).
    const fromA = { source: 'a', wide: v.transA, vec: v.vecA, storage: 'f32', dim: 'params.m' } as const;
    const fromB = { source: 'b', wide: !v.transB, vec: v.vecB, storage: v.b, dim: 'params.n' } as const;
    const la = tileLoader({ ...(v.swap ? fromB : fromA), name: 'a', width: tile.bm, origin: 'm0' }, tile);
    const lb = tileLoader({ ...(v.swap ? fromA : fromB), name: 'b', width: tile.bn, origin: 'n0' }, tile);
    const accs: string[] = [];
    for (let i = 0; i < tile.tm; i++)
      for (let g = 0; g < tile.tn / 4; g++) accs.push(`var acc${i}_${g} = vec4<f32>();`);
    const module = new ShaderModule();
    declareBindings(module, v.vecA, v.vecB ? quadType(v.b) : bindingType(v.b, false), v.out, v.b);
    module.workgroupArray('tile_a', 'vec4<f32>', 2 * la.size);
    module.workgroupArray('tile_b', 'vec4<f32>', 2 * lb.size);
    module.declare(emitFunctions(v.out));
    return module.build(
      undefined,
      threads,
      `  ${decodeWorkgroup()}
  // Groups of ${SWIZZLE} tile rows walk the columns together.
  let groupSize = ${SWIZZLE}u * params.tilesN;
  let firstM = block / groupSize * ${SWIZZLE}u;
  let rowsInGroup = min(params.tilesM - firstM, ${SWIZZLE}u);
  let inGroup = block % groupSize;
  let m0 = (firstM + inGroup % rowsInGroup) * ${tile.bm}u;
  let n0 = inGroup / rowsInGroup * ${tile.bn}u;
  let tm = tid / ${tile.bn / tile.tn}u;
  let tn = tid % ${tile.bn / tile.tn}u;
  ${la.setup}
  ${lb.setup}
  ${la.declare}
  ${lb.declare}
  ${accs.join('\n  ')}

  ${doubleBufferedKLoop(la, lb, tile.bk, tileCompute(tile, 'ca', 'cb'))}
  ${tileEpilogue(tile, v.swap)}`,
      '@builtin(local_invocation_index) tid: u32',
    );
  };
  return { key, kernel, code };
}
