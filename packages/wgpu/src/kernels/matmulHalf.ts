import type { SubgroupMatrixConfig } from '../device.js';
import type { HalfGemmTileName } from '../tuning.js';
import { ShaderModule } from '../wgsl/module.js';
import {
  declareBindings,
  decodeWorkgroup,
  doubleBufferedKLoop,
  emitFunctions,
  type Output,
  outputKey,
  type TileStage,
} from './matmulWgsl.js';

// The f16 matrix product on subgroup matrices (WGSL's
// `chromium_experimental_subgroup_matrix`: cooperative matrices, the tensor
// cores on NVIDIA): a and b both f16, products accumulated in f32 fragments.
//
// A workgroup computes a BM×BN tile of y. a and b are staged in workgroup
// memory as f16, each in its stored orientation (the transposes are the
// `col_major` flag of the fragment loads), double-buffered: the registers
// are filled with the next BK slice of K while the current one is
// multiplied. Elements outside the operands are staged as zeros, so ragged
// M, N and K need no other care. The workgroup's subgroups form a WM×WN grid;
// each holds FM×FN result fragments (M0×N0 of the configuration) and loads
// FM left and FN right fragments per K0 step. The results go through a small
// f32 workgroup buffer per subgroup to the shared epilogue (`emit4`: alpha,
// beta·c, linear's bias and activation; or raw sums per K split).
//
// `emulated` computes the same fragments with plain f32 arithmetic on the
// same workgroup tiles, offsets, strides and orientations, lane by lane: it
// runs wherever `shader-f16` does (lavapipe) and checks the staging, the
// fragment addressing and the edges that the subgroup-matrix variant shares.

/** The fragment shape and the subgroup size a variant is built for. */
export interface SubgroupMatrixShape {
  /** Rows of a left and a result fragment. */
  readonly m: number;
  /** Columns of a right and a result fragment. */
  readonly n: number;
  /** Columns of a left fragment, rows of a right one. */
  readonly k: number;
  /** Invocations per subgroup (the adapter's, fixed; 32 for the emulation). */
  readonly lanes: number;
}

/** A workgroup tile: BM×BN of y per BK step of K, on WM×WN subgroups. */
export interface HalfTile {
  readonly bm: number;
  readonly bn: number;
  readonly bk: number;
  readonly wm: number;
  readonly wn: number;
}

export const HALF_TILE_LARGE: HalfTile = { bm: 128, bn: 128, bk: 32, wm: 2, wn: 4 };
export const HALF_TILE_MID: HalfTile = { bm: 64, bn: 64, bk: 32, wm: 2, wn: 2 };

/** A tile by name (`BMxBNwWMxWN`, BK 32), as the f16GemmTile switch names it. */
export function halfTileNamed(name: HalfGemmTileName): HalfTile {
  const [, bm, bn, wm, wn] = /^(\d+)x(\d+)w(\d+)x(\d+)$/.exec(name)!.map(Number) as number[];
  return { bm: bm!, bn: bn!, bk: 32, wm: wm!, wn: wn! };
}

/** Halves of padding per staged row (16 bytes): spreads the fragment loads over banks. */
const PAD = 8;

export interface HalfGemmVariant {
  readonly compute: 'subgroup-matrix' | 'emulated';
  readonly shape: SubgroupMatrixShape;
  readonly tile: HalfTile;
  readonly transA: boolean;
  readonly transB: boolean;
  /** a (b) is read 8 halves per vec4<u32>: its stored rows are a multiple of 8 long, 16-byte aligned. */
  readonly vecA: boolean;
  readonly vecB: boolean;
  /**
   * a's stored rows are padded to a multiple of 8 halves (an f32 a rounded
   * into scratch so): rows of odd length load 8 halves at a time too.
   */
  readonly padA?: boolean;
  readonly out: Output;
}

/** A stored row length rounded up to whole 8-half vectors (`paddedRow` in WGSL). */
export const paddedRowLength = (len: number) => Math.ceil(len / 8) * 8;
const paddedRow = (len: string) => `((${len} + 7u) & ~7u)`;

/** The configuration of `configs` the f16 product uses: f16 operands, f32 results, fitting the tiles. */
export function pickSubgroupMatrixConfig(
  configs: readonly SubgroupMatrixConfig[],
): SubgroupMatrixConfig | undefined {
  const fits = (c: SubgroupMatrixConfig) =>
    [HALF_TILE_LARGE, HALF_TILE_MID].every(
      (t) => (t.bm / t.wm) % c.M === 0 && (t.bn / t.wn) % c.N === 0 && t.bk % c.K === 0,
    ) &&
    c.M * c.N >= 64 &&
    (c.M * c.N) % 4 === 0;
  const usable = configs.filter(
    (c) => c.componentType === 'f16' && c.resultComponentType === 'f32' && fits(c),
  );
  // The largest fragments (fewest loads per product), then the deepest.
  return usable.sort((x, y) => y.M * y.N - x.M * x.N || y.K - x.K)[0];
}

/** Invocations of a workgroup. */
export const halfThreads = (tile: HalfTile, shape: SubgroupMatrixShape) => tile.wm * tile.wn * shape.lanes;

/** Bytes of workgroup memory: two buffers of each staged operand, and a result fragment per subgroup. */
export function halfTileBytes(
  tile: HalfTile,
  shape: SubgroupMatrixShape,
  transA: boolean,
  transB: boolean,
): number {
  // Staged rows are padded: [width][BK + PAD] along K, [BK][width + PAD] along the width.
  const staged = (width: number, alongWidth: boolean) =>
    alongWidth ? width * (tile.bk + PAD) : tile.bk * (width + PAD);
  const halves = 2 * (staged(tile.bm, !transA) + staged(tile.bn, transB));
  return halves * 2 + tile.wm * tile.wn * shape.m * shape.n * 4;
}

/**
 * One operand as staged: a block of `rows` stored rows of `cols` contiguous
 * halves, copied into workgroup rows of `cols + PAD`.
 */
interface Staged {
  readonly name: 'a' | 'b';
  readonly rows: number;
  readonly cols: number;
  readonly vec: boolean;
  /** WGSL: the stored row length, the block's first row and column at K offset `k0`, and their bounds. */
  readonly ld: string;
  row0(k0: string): string;
  col0(k0: string): string;
  readonly rowEnd: string;
  readonly colEnd: string;
}

/** The block of an operand a tile stages, in its stored orientation. */
function stagedOperand(
  name: 'a' | 'b',
  trans: boolean,
  vec: boolean,
  width: number,
  bk: number,
  padded = false,
): Staged {
  const dim = name === 'a' ? 'params.m' : 'params.n';
  const ld = (len: string) => (padded ? paddedRow(len) : len);
  const origin = name === 'a' ? 'm0' : 'n0';
  // a [M, K] and bᵀ ([N, K]) store rows along the tile's width; aᵀ and b rows along K.
  const alongWidth = name === 'a' ? !trans : trans;
  return alongWidth
    ? {
        name,
        rows: width,
        cols: bk,
        vec,
        ld: ld('params.k'),
        row0: () => origin,
        col0: (k0) => k0,
        rowEnd: dim,
        colEnd: 'kEnd',
      }
    : {
        name,
        rows: bk,
        cols: width,
        vec,
        ld: ld(dim),
        row0: (k0) => k0,
        col0: () => origin,
        rowEnd: 'kEnd',
        colEnd: dim,
      };
}

/** Global → register → workgroup staging of one operand (the loader of the f32 tiles, in halves). */
function halfLoader(
  op: Staged,
  threads: number,
): TileStage & { setup: string; declare: string; stride: number } {
  const per = op.vec ? 8 : 1;
  const stride = op.cols + PAD;
  const count = (op.rows * op.cols) / per / threads;
  if (!Number.isInteger(count) || count < 1)
    throw new Error(`${op.name}: ${op.rows}×${op.cols} leaves threads idle`);
  const slots = Array.from({ length: count }, (_, j) => j);
  const reg = (j: number) => `${op.name}_r${j}`;
  const base = `${op.name}Base`;
  const perRow = op.cols / per;
  const setup = slots
    .map(
      (j) =>
        `let ${op.name}_row${j} = (tid + ${j * threads}u) / ${perRow}u; let ${op.name}_col${j} = (tid + ${j * threads}u) % ${perRow}u * ${per}u;`,
    )
    .join('\n  ');
  const declare = slots.map((j) => `var ${reg(j)}: ${op.vec ? 'vec4<u32>' : 'f16'};`).join('\n  ');
  const load = (k0: string) =>
    slots
      .map((j) => {
        const at = `${base} + gr * ${op.ld} + gc`;
        const read = op.vec
          ? `${op.name}[(${at}) / 8u]`
          : `bitcast<vec2<f16>>(${op.name}[(${at}) / 2u])[(${at}) % 2u]`;
        return `{
      let gr = ${op.row0(k0)} + ${op.name}_row${j};
      let gc = ${op.col0(k0)} + ${op.name}_col${j};
      ${reg(j)} = ${op.vec ? 'vec4<u32>()' : '0.0h'};
      if (gr < ${op.rowEnd} && gc < ${op.colEnd}) { ${reg(j)} = ${read}; }
    }`;
      })
      .join('\n    ');
  const store = (buf: string) =>
    slots
      .map((j) => {
        const at = `${buf} + ${op.name}_row${j} * ${stride}u + ${op.name}_col${j}`;
        if (!op.vec) return `tile_${op.name}[${at}] = ${reg(j)};`;
        return `{
      let at = ${at};
      ${['x', 'y', 'z', 'w']
        .map(
          (c, w) =>
            `let h${c} = bitcast<vec2<f16>>(${reg(j)}.${c}); tile_${op.name}[at + ${2 * w}u] = h${c}.x; tile_${op.name}[at + ${2 * w + 1}u] = h${c}.y;`,
        )
        .join('\n      ')}
    }`;
      })
      .join('\n    ');
  return { setup, declare, load, store, stride, size: op.rows * stride };
}

/** Pipeline-key and WGSL of the f16 product for one variant. */
export function halfGemmShader(v: HalfGemmVariant, kernel: string) {
  const { tile, shape } = v;
  const threads = halfThreads(tile, shape);
  const fm = tile.bm / tile.wm / shape.m;
  const fn = tile.bn / tile.wn / shape.n;
  if (!Number.isInteger(fm) || !Number.isInteger(fn) || tile.bk % shape.k !== 0)
    throw new Error(`tile ${JSON.stringify(tile)} does not fit fragments ${JSON.stringify(shape)}`);
  const key = [
    'matmul',
    `half-${v.compute}`,
    `${tile.bm}x${tile.bn}x${tile.bk}w${tile.wm}x${tile.wn}`,
    `f${shape.m}x${shape.n}x${shape.k}l${shape.lanes}`,
    `tA${+v.transA}tB${+v.transB}`,
    `a${v.vecA ? 8 : 1}${v.padA ? 'p' : ''}b${v.vecB ? 8 : 1}`,
    outputKey(v.out),
  ].join('/');
  const code = () => {
    const sa = stagedOperand('a', v.transA, v.vecA, tile.bm, tile.bk, v.padA);
    const sb = stagedOperand('b', v.transB, v.vecB, tile.bn, tile.bk);
    const la = halfLoader(sa, threads);
    const lb = halfLoader(sb, threads);
    // Fragment orientation: a left fragment is M0×K0; stored along K it is row-major.
    const colMajorA = v.transA;
    const colMajorB = v.transB;
    const frag = shape.m * shape.n;
    const real = v.compute === 'subgroup-matrix';
    const L = `subgroup_matrix_left<f16, ${shape.k}, ${shape.m}>`;
    const R = `subgroup_matrix_right<f16, ${shape.n}, ${shape.k}>`;
    const C = `subgroup_matrix_result<f32, ${shape.n}, ${shape.m}>`;
    /** WGSL: offset in tile_a of the left fragment at row `r` (in the tile), K `kk`. */
    const leftAt = (r: string, kk: string) =>
      colMajorA ? `(${kk}) * ${la.stride}u + (${r})` : `(${r}) * ${la.stride}u + (${kk})`;
    const rightAt = (c: string, kk: string) =>
      colMajorB ? `(${c}) * ${lb.stride}u + (${kk})` : `(${kk}) * ${lb.stride}u + (${c})`;
    // The emulation keeps its fragments in one array and loops where the real
    // kernel unrolls (llvmpipe took minutes to compile the unrolled emulation).
    const accs: string[] = [];
    if (real) for (let i = 0; i < fm; i++) for (let j = 0; j < fn; j++) accs.push(`var acc${i}_${j}: ${C};`);
    else accs.push(`var acc: array<array<f32, ${frag / shape.lanes}>, ${fm * fn}>;`);
    const rowOf = (i: number | string) =>
      `sgRow + ${typeof i === 'number' ? `${i * shape.m}u` : `${i} * ${shape.m}u`}`;
    const colOf = (j: number | string) =>
      `sgCol + ${typeof j === 'number' ? `${j * shape.n}u` : `${j} * ${shape.n}u`}`;
    const emulatedStep = `for (var kk = 0u; kk < ${tile.bk / shape.k}u; kk++) {
      for (var i = 0u; i < ${fm}u; i++) {
        for (var j = 0u; j < ${fn}u; j++) {
          emulatedMma(&acc[i * ${fn}u + j], ca + ${leftAt(rowOf('i'), `kk * ${shape.k}u`)}, cb + ${rightAt(colOf('j'), `kk * ${shape.k}u`)}, lane);
        }
      }
    }`;
    /** One K0 step of the real kernel, unrolled: FM left and FN right fragments, FM·FN products. */
    const step = (kk: number) => {
      const lines: string[] = [];
      for (let i = 0; i < fm; i++) {
        const at = `ca + ${leftAt(rowOf(i), `${kk * shape.k}u`)}`;
        lines.push(`let l${i} = subgroupMatrixLoad<${L}>(&tile_a, ${at}, ${colMajorA}, ${la.stride}u);`);
      }
      for (let j = 0; j < fn; j++) {
        const at = `cb + ${rightAt(colOf(j), `${kk * shape.k}u`)}`;
        lines.push(`let r${j} = subgroupMatrixLoad<${R}>(&tile_b, ${at}, ${colMajorB}, ${lb.stride}u);`);
      }
      for (let i = 0; i < fm; i++)
        for (let j = 0; j < fn; j++)
          lines.push(`acc${i}_${j} = subgroupMatrixMultiplyAccumulate(l${i}, r${j}, acc${i}_${j});`);
      return `{\n      ${lines.join('\n      ')}\n    }`;
    };
    const emulation = real
      ? ''
      : `
// Element e of a lane's share of a fragment is element e·${shape.lanes} + lane, row-major.
fn emulatedMma(acc: ptr<function, array<f32, ${frag / shape.lanes}>>, l: u32, r: u32, lane: u32) {
  for (var e = 0u; e < ${frag / shape.lanes}u; e++) {
    let flat = e * ${shape.lanes}u + lane;
    let row = flat / ${shape.n}u;
    let col = flat % ${shape.n}u;
    var s = 0.0;
    for (var q = 0u; q < ${shape.k}u; q++) {
      s += f32(tile_a[l + ${leftAt('row', 'q')}]) * f32(tile_b[r + ${rightAt('col', 'q')}]);
    }
    (*acc)[e] += s;
  }
}
fn emulatedStore(at: u32, acc: array<f32, ${frag / shape.lanes}>, lane: u32) {
  for (var e = 0u; e < ${frag / shape.lanes}u; e++) { tile_c[at + e * ${shape.lanes}u + lane] = acc[e]; }
}`;
    const sgStore = (i: number, j: number) =>
      real
        ? `subgroupMatrixStore(&tile_c, cAt, acc${i}_${j}, false, ${shape.n}u);`
        : `emulatedStore(cAt, acc[${i * fn + j}], lane);`;
    const epilogue: string[] = [];
    for (let i = 0; i < fm; i++)
      for (let j = 0; j < fn; j++)
        epilogue.push(`{
    ${sgStore(i, j)}
    workgroupBarrier();
    for (var q = lane * 4u; q < ${frag}u; q += ${shape.lanes * 4}u) {
      let row = m0 + ${rowOf(i)} + q / ${shape.n}u;
      let col = n0 + ${colOf(j)} + q % ${shape.n}u;
      if (row < params.m) {
        let v = vec4<f32>(tile_c[cAt + q], tile_c[cAt + q + 1u], tile_c[cAt + q + 2u], tile_c[cAt + q + 3u]);
        emit4(yBase + row * params.n + col, col, v, yOff);
      }
    }
    workgroupBarrier();
  }`);
    const sid = real ? 'sg' : `(tid / ${shape.lanes}u)`;
    const lane = real ? 'sgLane' : `(tid % ${shape.lanes}u)`;
    const module = new ShaderModule();
    if (real) {
      module.enable('chromium_experimental_subgroup_matrix').enable('subgroups');
      // Fragment offsets depend on subgroup_id: uniform per subgroup, not per workgroup.
      module.diagnostic('off', 'chromium.subgroup_matrix_uniformity');
    }
    declareBindings(module, v.vecA, v.vecB ? 'vec4<u32>' : 'u32', v.out, 'f16', 'f16');
    module.workgroupArray('tile_a', 'f16', 2 * la.size);
    module.workgroupArray('tile_b', 'f16', 2 * lb.size);
    module.workgroupArray('tile_c', 'f32', tile.wm * tile.wn * frag);
    module.declare(emitFunctions(v.out));
    module.declare(emulation);
    const multiply = real
      ? Array.from({ length: tile.bk / shape.k }, (_, kk) => step(kk)).join('\n    ')
      : emulatedStep;
    return module.build(
      undefined,
      threads,
      `  ${decodeWorkgroup()}
  // Groups of 8 tile rows walk the columns together (L2 reuse).
  let groupSize = 8u * params.tilesN;
  let firstM = block / groupSize * 8u;
  let rowsInGroup = min(params.tilesM - firstM, 8u);
  let inGroup = block % groupSize;
  let m0 = (firstM + inGroup % rowsInGroup) * ${tile.bm}u;
  let n0 = inGroup / rowsInGroup * ${tile.bn}u;
  let subgroup = ${sid};
  let lane = ${lane};
  let sgRow = subgroup / ${tile.wn}u * ${tile.bm / tile.wm}u;
  let sgCol = subgroup % ${tile.wn}u * ${tile.bn / tile.wn}u;
  let cAt = subgroup * ${frag}u;
  ${la.setup}
  ${lb.setup}
  ${la.declare}
  ${lb.declare}
  ${accs.join('\n  ')}

  ${doubleBufferedKLoop(la, lb, tile.bk, multiply)}
  ${epilogue.join('\n  ')}`,
      `@builtin(local_invocation_index) tid: u32${real ? ', @builtin(subgroup_id) sg: u32, @builtin(subgroup_invocation_id) sgLane: u32' : ''}`,
    );
  };
  return { key, kernel, code };
}
