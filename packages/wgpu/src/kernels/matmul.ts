import {
  batchedMatmul,
  type LinearActivation,
  type MatmulDims,
  type MatmulLaunch,
  type MatmulTile,
  matmul,
  pow2AtLeast,
} from '@rayo/core';
import {
  type AnyWgpuKernel,
  gridFor,
  type KernelEncoder,
  linearWorkgroup,
  type Operand,
  storage,
  uniform,
  wgpuKernel,
} from '../kernel.js';
import { paramLayout } from '../params.js';
import { BUILTINS, elementGrid, elementIndex, WGSL_MATH } from './common.js';

// Three kernels, chosen by shape (see `planMatmul`):
//  - gemv (M = 1): the whole workgroup streams a block of b with coalesced
//    vec4 loads, K split over its invocations, and sums the split with
//    subgroup operations where the device has them (workgroup memory where
//    not); memory-bound by design.
//  - smallm (M ≤ 32 with b stored [N, K], M ≤ 4 otherwise): the same
//    streaming kernels, each loaded vector of b reused for 4 rows of a (and,
//    with b stored [N, K], each vector of a for 4 rows of b) in registers.
//  - tile: register-blocked GEMM with double-buffered workgroup tiles, vec4
//    global and workgroup loads, transposes baked into the loaders.
// Each may split K across workgroups when the output alone gives too few of
// them; the partial sums then go through a scratch buffer and a reduce pass
// that applies the alpha/beta/c epilogue (and linear's bias and activation).

const PARAMS = paramLayout([
  ['m', 'u32'],
  ['n', 'u32'],
  ['k', 'u32'],
  /** Output blocks along M and N per batch entry and split. */
  ['tilesM', 'u32'],
  ['tilesN', 'u32'],
  ['splits', 'u32'],
  ['batches', 'u32'],
  ['kPerSplit', 'u32'],
  ['strideA', 'u32'],
  ['strideB', 'u32'],
  ['strideY', 'u32'],
  /** Elements of one split's partial sums (batches · M · N). */
  ['partStride', 'u32'],
  ['alpha', 'f32'],
  ['beta', 'f32'],
] as const);

const REDUCE_PARAMS = paramLayout([
  ['total', 'u32'],
  ['splits', 'u32'],
  /** Columns of y: the bias of element i is bias[i % n]. */
  ['n', 'u32'],
  ['alpha', 'f32'],
  ['beta', 'f32'],
] as const);

/** Workgroups a split-K plan aims for: a few per SM of a large GPU. */
const TARGET_WORKGROUPS = 256;
/** Fewest K per split worth a workgroup (and a share of the reduce pass). */
const MIN_SPLIT_K = 256;
/** Largest M served by the streaming kernels when b is stored [N, K]. */
const SMALL_M_MAX = 32;

// ---- shared WGSL pieces ------------------------------------------------------

/** Storage declaration of a binding read as vec4 or scalar. */
function bind(binding: number, name: string, vec: boolean, access: 'read' | 'read_write'): string {
  return storage(binding, name, vec ? 'vec4<f32>' : 'f32', access);
}

/**
 * What `linear` adds after alpha·v (+ beta·c): a bias per column, then an
 * activation, with the pre-activation z stored too when `z` is set.
 */
export interface Epilogue {
  readonly bias: boolean;
  readonly activation: LinearActivation;
  readonly z: boolean;
}

/** How a kernel's results reach y. */
interface Output {
  /** y (and c, and z) bound as vec4: N % 4 = 0 and aligned offsets. */
  readonly vec: boolean;
  /** c is present. */
  readonly c: boolean;
  readonly epilogue?: Epilogue;
}

function epilogueKey(e: Epilogue | undefined): string {
  return e ? `/${e.bias ? 'bias' : 'nobias'}/${e.activation}${e.z ? '/z' : ''}` : '';
}

function outputKey(o: Output): string {
  return `y${o.vec ? 4 : 1}/c${+o.c}${epilogueKey(o.epilogue)}`;
}

/** WGSL `act_f(z)` for an activation, with the math it uses (nothing without one). */
function activationWgsl(e: Epilogue | undefined): string {
  if (!e || e.activation === 'none') return '';
  const body: Record<Exclude<LinearActivation, 'none'>, string> = {
    relu: 'max(x, 0.0)',
    gelu: 'gelu_f(x)',
    silu: 'silu_f(x)',
    sigmoid: 'sigmoid_f(x)',
    tanh: 'tanh_f(x)',
  };
  return `${WGSL_MATH}\nfn act_f(x: f32) -> f32 { return ${body[e.activation]}; }`;
}

/**
 * WGSL statements that store `value` (an f32 or, with `vec4`, a vec4
 * expression of the product) of column `col` as y: plainly, or through the
 * epilogue (z = value + bias, stored when asked, and y = act(z)). `yAt` and
 * `zAt` are the index expressions of y and z.
 */
function storeWgsl(e: Epilogue | undefined, value: string, col: string, yAt: string, vec4: boolean): string {
  if (!e) return `y${yAt} = ${value};`;
  const bias = !e.bias
    ? ''
    : vec4
      ? ` + vec4<f32>(bias[${col}], bias[${col} + 1u], bias[${col} + 2u], bias[${col} + 3u])`
      : ` + bias[${col}]`;
  const act = (x: string) =>
    e.activation === 'none'
      ? x
      : vec4
        ? `vec4<f32>(act_f(${x}.x), act_f(${x}.y), act_f(${x}.z), act_f(${x}.w))`
        : `act_f(${x})`;
  return `{ let zv = ${value}${bias};${e.z ? ` z${yAt} = zv;` : ''} y${yAt} = ${act('zv')}; }`;
}

/**
 * WGSL `emit4(idx, col, v)` / `emit1(idx, v)`: the epilogue
 * y = alpha·v (+ beta·c) at element `idx` of y (columns col..col+3 for emit4,
 * those past N skipped). A K split writes its raw sums into scratch the same
 * way: alpha = 1, no c, and its own block of the output at `yOff`.
 */
function emitFunctions(o: Output): string {
  const e = o.epilogue;
  const value = (v: string, at: string) => `params.alpha * ${v}${o.c ? ` + params.beta * c[${at}]` : ''}`;
  const vec4Store = o.vec
    ? `if (col < params.n) { ${storeWgsl(e, value('v', 'idx / 4u'), 'col', '[(yOff + idx) / 4u]', true)} }`
    : `for (var j = 0u; j < 4u; j++) {
    if (col + j < params.n) { ${storeWgsl(e, value('v[j]', 'idx + j'), 'col + j', '[yOff + idx + j]', false)} }
  }`;
  // Element idx of a batch's [M, N] block is in column idx % N (blocks start at multiples of N).
  const scalarStore = o.vec
    ? `let at = yOff + idx;\n  ${storeWgsl(e, value('v', 'idx / 4u][idx % 4u'), 'idx % params.n', '[at / 4u][at % 4u]', false)}`
    : storeWgsl(e, value('v', 'idx'), 'idx % params.n', '[yOff + idx]', false);
  return `${activationWgsl(e)}
fn emit4(idx: u32, col: u32, v: vec4<f32>, yOff: u32) {
  ${vec4Store}
}
fn emit1(idx: u32, v: f32, yOff: u32) {
  ${scalarStore}
}`;
}

/**
 * WGSL that maps the linear workgroup index to (block, split, batch) and
 * returns from surplus workgroups of a `gridFor` grid.
 */
function decodeWorkgroup(): string {
  return `let wgi = ${linearWorkgroup};
  let blocks = params.tilesM * params.tilesN;
  if (wgi >= blocks * params.splits * params.batches) { return; }
  let block = wgi % blocks;
  let rest = wgi / blocks;
  let split = rest % params.splits;
  let batch = rest / params.splits;
  let kBegin = split * params.kPerSplit;
  let kEnd = min(params.k, kBegin + params.kPerSplit);
  let aBase = batch * params.strideA;
  let bBase = batch * params.strideB;
  let yBase = batch * params.strideY;
  let yOff = split * params.partStride;`;
}

/** a, b, then c, bias, y and z where present (the order `outputBuffers` binds them in), then the params. */
function bindings(vecA: boolean, vecB: boolean, o: Output): string {
  const lines = [bind(0, 'a', vecA, 'read'), bind(1, 'b', vecB, 'read')];
  if (o.c) lines.push(bind(lines.length, 'c', o.vec, 'read'));
  if (o.epilogue?.bias) lines.push(storage(lines.length, 'bias', 'f32', 'read'));
  lines.push(bind(lines.length, 'y', o.vec, 'read_write'));
  if (o.epilogue?.z) lines.push(bind(lines.length, 'z', o.vec, 'read_write'));
  lines.push(uniform(lines.length));
  return lines.join('\n');
}

// ---- tiled GEMM ----------------------------------------------------------------

export const TILE_LARGE: MatmulTile = { bm: 128, bn: 128, bk: 8, tm: 8, tn: 8 };
export const TILE_MID: MatmulTile = { bm: 64, bn: 64, bk: 16, tm: 4, tn: 4 };

// Streaming shapes, as measured fastest on an H100 (Dawn/Vulkan).
const SMALL_M_DOT: StreamShape = { group: 32, cols: 4, unroll: 2 };
const AXPY_LANES = 16;
/** Rows of a per small-M streaming workgroup. */
const STREAM_ROWS = 4;

const threadsOf = (t: MatmulTile) => (t.bm / t.tm) * (t.bn / t.tn);

/** Bytes of workgroup memory: two buffers of each operand's tile. */
const tileBytes = (t: MatmulTile) => 2 * t.bk * (t.bm + t.bn) * 4;

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
      if (gw < ${op.dim} && gk < kEnd) { ${reg(j)} = ${op.source}[${op.vec ? `(${idx}) / 4u` : idx}]; }
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

interface TileVariant {
  readonly tile: MatmulTile;
  /**
   * Computes yᵀ = op(b)ᵀ·op(a)ᵀ instead: for aᵀ·bᵀ this turns two K-major
   * operands into the b-then-a pair the loaders handle fastest.
   */
  readonly swap: boolean;
  readonly transA: boolean;
  readonly transB: boolean;
  readonly vecA: boolean;
  readonly vecB: boolean;
  readonly out: Output;
}

/** Consecutive tile rows that share columns of b, for L2 reuse. */
const SWIZZLE = 8;

function tileShader(v: TileVariant, kernel: string) {
  const { tile } = v;
  const threads = threadsOf(tile);
  const key = [
    'matmul',
    `tile${tile.bm}x${tile.bn}x${tile.bk}`,
    `t${tile.tm}x${tile.tn}`,
    `tA${+v.transA}tB${+v.transB}${v.swap ? 'swap' : ''}`,
    `a${v.vecA ? 4 : 1}b${v.vecB ? 4 : 1}`,
    outputKey(v.out),
  ].join('/');
  const code = () => {
    // Swapped, the tile rows run along N (b, [N, K]) and its columns along M (a, [K, M]).
    const fromA = { source: 'a', wide: v.transA, vec: v.vecA, dim: 'params.m' } as const;
    const fromB = { source: 'b', wide: !v.transB, vec: v.vecB, dim: 'params.n' } as const;
    const la = tileLoader({ ...(v.swap ? fromB : fromA), name: 'a', width: tile.bm, origin: 'm0' }, tile);
    const lb = tileLoader({ ...(v.swap ? fromA : fromB), name: 'b', width: tile.bn, origin: 'n0' }, tile);
    const accs: string[] = [];
    for (let i = 0; i < tile.tm; i++)
      for (let g = 0; g < tile.tn / 4; g++) accs.push(`var acc${i}_${g} = vec4<f32>();`);
    return `
${PARAMS.wgsl}
${bindings(v.vecA, v.vecB, v.out)}
var<workgroup> tile_a: array<vec4<f32>, ${2 * la.size}>;
var<workgroup> tile_b: array<vec4<f32>, ${2 * lb.size}>;
${emitFunctions(v.out)}

@compute @workgroup_size(${threads})
fn main(${BUILTINS}, @builtin(local_invocation_index) tid: u32) {
  ${decodeWorkgroup()}
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

  ${la.load('kBegin')}
  ${lb.load('kBegin')}
  ${la.store('0u')}
  ${lb.store('0u')}
  workgroupBarrier();
  let steps = (kEnd - kBegin + ${tile.bk - 1}u) / ${tile.bk}u;
  for (var s = 0u; s < steps; s++) {
    let cur = s % 2u;
    let next = s + 1u < steps;
    if (next) {
      let k0 = kBegin + (s + 1u) * ${tile.bk}u;
      ${la.load('k0')}
      ${lb.load('k0')}
    }
    let ca = cur * ${la.size}u;
    let cb = cur * ${lb.size}u;
    ${tileCompute(tile, 'ca', 'cb')}
    if (next) {
      let na = ${la.size}u - ca;
      let nb = ${lb.size}u - cb;
      ${la.store('na')}
      ${lb.store('nb')}
    }
    workgroupBarrier();
  }
  ${tileEpilogue(tile, v.swap)}
}`;
  };
  return { key, kernel, code };
}

// ---- streaming kernels: small M -------------------------------------------------

const STREAM_THREADS = 256;

/** Shape of a streaming workgroup (see dotBody and axpyBody). */
export interface StreamShape {
  /** transB: threads sharing one row of b along K; otherwise vec4 (or scalar) column lanes. */
  readonly group: number;
  /** transB: columns (rows of b) per thread, each loaded a vector serving all of them. */
  readonly cols: number;
  /** Loop bodies per iteration: independent loads in flight. */
  readonly unroll: number;
}

interface StreamVariant {
  /** Rows of a per workgroup. */
  readonly rows: number;
  readonly shape: StreamShape;
  readonly transA: boolean;
  readonly transB: boolean;
  /** vec4 loads of a (transB: along K) and of b. */
  readonly vecA: boolean;
  readonly vecB: boolean;
  readonly out: Output;
}

/** Output columns one streaming workgroup produces. */
function streamColumns(v: { transB: boolean; vecB: boolean; shape: StreamShape }): number {
  if (v.transB) return (STREAM_THREADS / v.shape.group) * v.shape.cols;
  return v.shape.group * (v.vecB ? 4 : 1);
}

/** WGSL of op(a)(row, k) from a scalar binding. */
function aScalar(v: StreamVariant, row: string, k: string): string {
  return v.transA ? `a[aBase + (${k}) * params.m + ${row}]` : `a[aBase + ${row} * params.k + ${k}]`;
}

/**
 * WGSL: a loop over `k` from `first` below `end` in steps of `stride`, its
 * body `step(k)` repeated `unroll` times per iteration (independent loads in
 * flight), then the remainder one at a time.
 */
export function streamLoop(
  first: string,
  end: string,
  stride: number,
  unroll: number,
  step: (k: string) => string,
): string {
  const main =
    unroll > 1
      ? `for (; k + ${stride * (unroll - 1)}u < ${end}; k += ${stride * unroll}u) {
      ${Array.from({ length: unroll }, (_, i) => step(`k + ${stride * i}u`)).join('\n      ')}
    }
    `
      : '';
  return `var k = ${first};
    ${main}for (; k < ${end}; k += ${stride}u) {
      ${step('k')}
    }`;
}

/** WGSL: a tree sum over `count` threads `stride` apart of `values` slots of red (one barrier per level). */
function treeReduce(values: number, count: number, stride: number, self: string): string {
  const at = (i: number, o: string) => `red[${i * STREAM_THREADS}u + tid${o}]`;
  return `${Array.from({ length: values }, (_, i) => `${at(i, '')} = acc${i};`).join('\n  ')}
  workgroupBarrier();
  for (var s = ${count / 2}u; s > 0u; s >>= 1u) {
    if (${self} < s) {
      ${Array.from({ length: values }, (_, i) => `${at(i, '')} += ${at(i, ` + s * ${stride}u`)};`).join('\n      ')}
    }
    workgroupBarrier();
  }`;
}

/**
 * transB (b is [N, K], the usual weight layout): each output is a dot
 * product of a row of a with a row of b. `group` threads share rows of b and
 * walk K in vec4 steps (coalesced), each thread holding `cols` rows of b and
 * `rows` rows of a in registers, so each loaded vector is reused across the
 * other operand's rows. One tree reduction in workgroup memory sums the group.
 */
function dotBody(v: StreamVariant): string {
  const { group, cols, unroll } = v.shape;
  const rows = Array.from({ length: v.rows }, (_, r) => r);
  const cs = Array.from({ length: cols }, (_, c) => c);
  const acc = (r: number, c: number) => `acc${r * cols + c}`;
  const aAt = (r: number, k: string) => {
    if (!v.vecB) return aScalar(v, `row${r}`, k);
    if (v.vecA) return `a[(aBase + row${r} * params.k) / 4u + ${k}]`;
    return `vec4<f32>(${[0, 1, 2, 3].map((i) => aScalar(v, `row${r}`, `(${k}) * 4u + ${i}u`)).join(', ')})`;
  };
  const step = (k: string) => {
    const bs = cs.map((c) =>
      v.vecB ? `let b${c} = b[bRow${c} / 4u + ${k}];` : `let b${c} = b[bRow${c} + ${k}];`,
    );
    const terms = rows.map((r) => {
      const fmas = cs.map((c) =>
        v.vecB ? `${acc(r, c)} += dot(a${r}, b${c});` : `${acc(r, c)} = fma(a${r}, b${c}, ${acc(r, c)});`,
      );
      return `{ let a${r} = ${aAt(r, k)}; ${fmas.join(' ')} }`;
    });
    return `{\n        ${bs.join(' ')}\n        ${terms.join('\n        ')}\n      }`;
  };
  const values = v.rows * cols;
  return `
  let g = tid % ${group}u;
  let n0 = block / params.tilesM * ${streamColumns(v)}u + tid / ${group}u * ${cols}u;
  let m0 = block % params.tilesM * ${v.rows}u;
  ${rows.map((r) => `let row${r} = min(m0 + ${r}u, params.m - 1u);`).join('\n  ')}
  // Rows of b past N are clamped (read, never written).
  ${cs.map((c) => `let bRow${c} = bBase + min(n0 + ${c}u, params.n - 1u) * params.k;`).join('\n  ')}
  ${Array.from({ length: values }, (_, i) => `var acc${i} = 0.0;`).join('\n  ')}
  if (n0 < params.n) {
    // K in vec4 (or scalar) units; kBegin and kPerSplit are multiples of 4.
    ${streamLoop(`${v.vecB ? 'kBegin / 4u' : 'kBegin'} + g`, v.vecB ? 'kEnd / 4u' : 'kEnd', group, unroll, step)}
  }
  ${treeReduce(values, group, 1, 'g')}
  if (g == 0u) {
    ${rows
      .flatMap((r) =>
        cs.map(
          (c) =>
            `if (m0 + ${r}u < params.m && n0 + ${c}u < params.n) { emit1(yBase + (m0 + ${r}u) * params.n + n0 + ${c}u, red[${(r * cols + c) * STREAM_THREADS}u + tid], yOff); }`,
        ),
      )
      .join('\n    ')}
  }`;
}

/**
 * No transB (b is [K, N]): `group` lanes own 4 adjacent columns each (one
 * vec4 of a row of b, consecutive lanes on consecutive vectors); the other
 * threads split K into slices. Each b vector is loaded once and multiplied by
 * every row's a(row, k) (one address per warp: a broadcast). Then one tree
 * reduction over the slices.
 */
function axpyBody(v: StreamVariant): string {
  const { group: lanes, unroll } = v.shape;
  const slices = STREAM_THREADS / lanes;
  const width = v.vecB ? 4 : 1;
  const rows = Array.from({ length: v.rows }, (_, r) => r);
  const type = v.vecB ? 'vec4<f32>' : 'f32';
  const splat = (x: string) => (v.vecB ? `vec4<f32>(${x})` : x);
  const step = (k: string) => {
    const bv = v.vecB
      ? `b[(bBase + (${k}) * params.n) / 4u + col / 4u]`
      : `b[bBase + (${k}) * params.n + col]`;
    const terms = rows.map((r) => `acc${r} = fma(${splat(aScalar(v, `row${r}`, k))}, bv, acc${r});`);
    return `{ let bv = ${bv}; ${terms.join(' ')} }`;
  };
  const emit = (r: number) => {
    const value = `red[${r * STREAM_THREADS}u + tid]`;
    const idx = `yBase + (m0 + ${r}u) * params.n + col`;
    return v.vecB ? `emit4(${idx}, col, ${value}, yOff);` : `emit1(${idx}, ${value}, yOff);`;
  };
  return `
  let lane = tid % ${lanes}u;
  let slice = tid / ${lanes}u;
  let col = block / params.tilesM * ${lanes * width}u + lane * ${width}u;
  let m0 = block % params.tilesM * ${v.rows}u;
  ${rows.map((r) => `let row${r} = min(m0 + ${r}u, params.m - 1u);`).join('\n  ')}
  ${rows.map((r) => `var acc${r} = ${type}();`).join('\n  ')}
  if (col < params.n) {
    ${streamLoop('kBegin + slice', 'kEnd', slices, unroll, step)}
  }
  ${treeReduce(v.rows, slices, lanes, 'slice')}
  if (slice == 0u && col < params.n) {
    ${rows.map((r) => `if (m0 + ${r}u < params.m) { ${emit(r)} }`).join('\n    ')}
  }`;
}

function streamShader(v: StreamVariant, kernel: string) {
  const { group, cols, unroll } = v.shape;
  const key = [
    'matmul',
    `smallm/rows${v.rows}`,
    v.transB ? `dot/g${group}c${cols}u${unroll}` : `axpy/l${group}u${unroll}`,
    `tA${+v.transA}tB${+v.transB}`,
    `a${v.vecA ? 4 : 1}b${v.vecB ? 4 : 1}`,
    outputKey(v.out),
  ].join('/');
  const values = v.transB ? v.rows * cols : v.rows;
  const type = v.transB || !v.vecB ? 'f32' : 'vec4<f32>';
  const code = () => `
${PARAMS.wgsl}
${bindings(v.vecA, v.vecB, v.out)}
var<workgroup> red: array<${type}, ${values * STREAM_THREADS}>;
${emitFunctions(v.out)}

@compute @workgroup_size(${STREAM_THREADS})
fn main(${BUILTINS}, @builtin(local_invocation_index) tid: u32) {
  ${decodeWorkgroup()}
  ${v.transB ? dotBody(v) : axpyBody(v)}
}`;
  return { key, kernel, code };
}

// ---- GEMV ----------------------------------------------------------------------

/** The same as the streaming kernels': `treeReduce` lays values out by it. */
const GEMV_THREADS = STREAM_THREADS;
/** transB: rows of b (outputs) per workgroup; every invocation reads all of them. */
const GEMV_DOT_COLS = 8;
const GEMV_DOT_UNROLL = 2;
/** No transB: K steps per loop iteration, each a load of b in flight. */
const GEMV_AXPY_UNROLL = 8;
/** No transB: bytes of a row of b one workgroup reads, widest first while the workgroups fill the GPU. */
const GEMV_AXPY_ROW_BYTES = [256, 128, 64];

interface GemvVariant {
  readonly transB: boolean;
  /** vec4 loads of a (transB only) and of b. */
  readonly vecA: boolean;
  readonly vecB: boolean;
  /** No transB: invocations side by side along a row of b, each on `vecB ? 4 : 1` columns. */
  readonly lanes: number;
  /** Reduce with subgroup operations (the `subgroups` feature). */
  readonly subgroups: boolean;
  readonly out: Output;
}

/** Output columns one GEMV workgroup produces. */
function gemvColumns(v: Pick<GemvVariant, 'transB' | 'vecB' | 'lanes'>): number {
  return v.transB ? GEMV_DOT_COLS : v.lanes * (v.vecB ? 4 : 1);
}

/**
 * WGSL: sets the workgroup flag `scattered` unless every subgroup is full and
 * numbered in invocation order (subgroup_invocation_id = local index mod
 * subgroup size). WGSL does not promise that layout, though drivers use it;
 * where it fails, the kernel takes its workgroup-memory path instead.
 */
export const CHECK_SUBGROUP_LAYOUT = `let inOrder = subgroupAll(sgid == tid % sgs);
  let full = subgroupAdd(1u) == sgs;
  if (!(inOrder && full)) { atomicStore(&scattered, 1u); }`;

/**
 * transB (b is [N, K]): all invocations walk K together over the same
 * GEMV_DOT_COLS rows of b (a warp reads 512 contiguous bytes of each), so
 * every invocation holds partial sums of the same outputs: one subgroupAdd
 * per output, then one value per subgroup through workgroup memory.
 */
function gemvDotBody(v: GemvVariant): string {
  const cs = Array.from({ length: GEMV_DOT_COLS }, (_, c) => c);
  const av = (k: string) => {
    if (!v.vecB) return `a[aBase + ${k}]`;
    if (v.vecA) return `a[aBase / 4u + ${k}]`;
    return `vec4<f32>(${[0, 1, 2, 3].map((i) => `a[aBase + (${k}) * 4u + ${i}u]`).join(', ')})`;
  };
  const step = (k: string) => {
    const terms = cs.map((c) =>
      v.vecB
        ? `acc${c} += dot(av, b[bRow${c} / 4u + ${k}]);`
        : `acc${c} = fma(av, b[bRow${c} + ${k}], acc${c});`,
    );
    return `{ let av = ${av(k)};
        ${terms.join('\n        ')} }`;
  };
  const subgroupSum = `
  ${CHECK_SUBGROUP_LAYOUT}
  if (workgroupUniformLoad(&scattered) == 0u) {
    ${cs.map((c) => `let s${c} = subgroupAdd(acc${c});`).join('\n    ')}
    if (sgid == 0u) {
      ${cs.map((c) => `red[tid / sgs * ${GEMV_DOT_COLS}u + ${c}u] = s${c};`).join('\n      ')}
    }
    workgroupBarrier();
    if (tid < ${GEMV_DOT_COLS}u) {
      for (var j = 0u; j < ${GEMV_THREADS}u / sgs; j++) { total += red[j * ${GEMV_DOT_COLS}u + tid]; }
    }
  } else {`;
  return `
  let n0 = block * ${GEMV_DOT_COLS}u;
  // Rows of b past N are clamped (read, never written).
  ${cs.map((c) => `let bRow${c} = bBase + min(n0 + ${c}u, params.n - 1u) * params.k;`).join('\n  ')}
  ${cs.map((c) => `var acc${c} = 0.0;`).join('\n  ')}
  // K in vec4 (or scalar) units; kBegin and kPerSplit are multiples of 4.
  ${streamLoop(`${v.vecB ? 'kBegin / 4u' : 'kBegin'} + tid`, v.vecB ? 'kEnd / 4u' : 'kEnd', GEMV_THREADS, GEMV_DOT_UNROLL, step)}
  var total = 0.0;${v.subgroups ? subgroupSum : ''}
  ${treeReduce(GEMV_DOT_COLS, GEMV_THREADS, 1, 'tid')}
  if (tid < ${GEMV_DOT_COLS}u) { total = red[tid * ${GEMV_THREADS}u]; }${v.subgroups ? '\n  }' : ''}
  if (tid < ${GEMV_DOT_COLS}u && n0 + tid < params.n) { emit1(yBase + n0 + tid, total, yOff); }`;
}

/**
 * No transB (b is [K, N]): `lanes` invocations side by side read one row
 * segment of b (vec4s of adjacent columns); the workgroup's other
 * invocations take further rows, so K is split into slices. Partners across
 * slices within a subgroup add up with subgroupShuffleXor; one slice per
 * subgroup then goes through workgroup memory.
 */
function gemvAxpyBody(v: GemvVariant): string {
  const lanes = v.lanes;
  const slices = GEMV_THREADS / lanes;
  const width = v.vecB ? 4 : 1;
  const type = v.vecB ? 'vec4<f32>' : 'f32';
  const step = (k: string) => {
    const bv = v.vecB ? `b[(bBase + (${k}) * params.n + col) / 4u]` : `b[bBase + (${k}) * params.n + col]`;
    return `acc = fma(${type}(a[aBase + ${k}]), ${bv}, acc);`;
  };
  const subgroupSum = `
  ${CHECK_SUBGROUP_LAYOUT}
  if (workgroupUniformLoad(&scattered) == 0u) {
    // Invocations sgid ^ m (m a multiple of the lanes) hold the same columns.
    for (var m = ${lanes}u; m < sgs; m <<= 1u) { acc += subgroupShuffleXor(acc, m); }
    stride = max(sgs / ${lanes}u, 1u);
  }`;
  return `
  let lane = tid % ${lanes}u;
  let slice = tid / ${lanes}u;
  let col = block * ${lanes * width}u + lane * ${width}u;
  var acc = ${type}();
  if (col < params.n) {
    ${streamLoop('kBegin + slice', 'kEnd', slices, GEMV_AXPY_UNROLL, step)}
  }
  // Slices \`stride\` apart hold the sums of the slices between them.
  var stride = 1u;${v.subgroups ? subgroupSum : ''}
  if (slice % stride == 0u) { red[tid] = acc; }
  workgroupBarrier();
  if (tid < ${lanes}u) {
    let col = block * ${lanes * width}u + tid * ${width}u;
    var total = ${type}();
    for (var j = 0u; j < ${slices}u; j += stride) { total += red[j * ${lanes}u + tid]; }
    if (col < params.n) { ${v.vecB ? 'emit4(yBase + col, col, total, yOff);' : 'emit1(yBase + col, total, yOff);'} }
  }`;
}

function gemvShader(v: GemvVariant, kernel: string) {
  const key = [
    'matmul/gemv',
    v.transB ? `dot/c${GEMV_DOT_COLS}u${GEMV_DOT_UNROLL}` : `axpy/l${v.lanes}u${GEMV_AXPY_UNROLL}`,
    v.subgroups ? 'subgroups' : 'workgroup',
    `a${v.vecA ? 4 : 1}b${v.vecB ? 4 : 1}`,
    outputKey(v.out),
  ].join('/');
  const red = v.transB
    ? `array<f32, ${GEMV_DOT_COLS * GEMV_THREADS}>`
    : `array<${v.vecB ? 'vec4<f32>' : 'f32'}, ${GEMV_THREADS}>`;
  const subgroupBuiltins = v.subgroups
    ? ', @builtin(subgroup_invocation_id) sgid: u32, @builtin(subgroup_size) sgs: u32'
    : '';
  const code = () => `${v.subgroups ? 'enable subgroups;\n' : ''}
${PARAMS.wgsl}
${bindings(v.vecA, v.vecB, v.out)}
var<workgroup> red: ${red};
${v.subgroups ? 'var<workgroup> scattered: atomic<u32>;' : ''}
${emitFunctions(v.out)}

@compute @workgroup_size(${GEMV_THREADS})
fn main(${BUILTINS}, @builtin(local_invocation_index) tid: u32${subgroupBuiltins}) {
  ${decodeWorkgroup()}
  ${v.transB ? gemvDotBody(v) : gemvAxpyBody(v)}
}`;
  return { key, kernel, code };
}

// ---- split-K reduction and the K = 0 epilogue ------------------------------------

/** Binds part (when partial), c, bias, y and z where present, then the params. */
function reduceShader(partial: boolean, c: boolean, epilogue: Epilogue | undefined, kernel: string) {
  const sum = partial
    ? `var acc = 0.0;
  for (var s = 0u; s < params.splits; s++) { acc += part[s * params.total + i]; }`
    : 'let acc = 0.0;';
  const names = [...(partial ? ['part'] : []), ...(c ? ['c'] : []), ...(epilogue?.bias ? ['bias'] : [])];
  const lines = names.map((name, i) => storage(i, name, 'f32', 'read'));
  lines.push(storage(lines.length, 'y', 'f32', 'read_write'));
  if (epilogue?.z) lines.push(storage(lines.length, 'z', 'f32', 'read_write'));
  lines.push(uniform(lines.length));
  const value = `params.alpha * acc${c ? ' + params.beta * c[i]' : ''}`;
  return {
    key: `matmul/reduce/${partial ? 'splits' : 'empty'}/c${+c}${epilogueKey(epilogue)}`,
    kernel,
    code: () => `
${REDUCE_PARAMS.wgsl}
${lines.join('\n')}
${activationWgsl(epilogue)}
@compute @workgroup_size(256)
fn main(${BUILTINS}) {
  ${elementIndex('params.total')}
  ${sum}
  ${storeWgsl(epilogue, value, 'i % params.n', '[i]', false)}
}`,
  };
}

// ---- planning --------------------------------------------------------------------

export interface MatmulProblem extends MatmulDims {
  /** Byte offsets of the operands (vec4 bindings need 16-byte alignment). */
  readonly offsets?: {
    readonly a: number;
    readonly b: number;
    readonly c?: number;
    readonly y: number;
    readonly z?: number;
  };
}

export type MatmulPlan =
  | { readonly path: 'empty' }
  | {
      readonly path: 'gemv';
      readonly variant: Omit<GemvVariant, 'out'>;
      readonly vecY: boolean;
      readonly tilesM: number;
      readonly tilesN: number;
      readonly splits: number;
      readonly kPerSplit: number;
    }
  | {
      readonly path: 'smallm';
      readonly variant: Omit<StreamVariant, 'out'>;
      readonly vecY: boolean;
      readonly tilesM: number;
      readonly tilesN: number;
      readonly splits: number;
      readonly kPerSplit: number;
    }
  | {
      readonly path: 'tile';
      readonly variant: Omit<TileVariant, 'out'>;
      readonly vecY: boolean;
      readonly tilesM: number;
      readonly tilesN: number;
      readonly splits: number;
      readonly kPerSplit: number;
    };

/** K splits that bring `blocks` workgroups near the target; kPerSplit a multiple of `granule`. */
function splitK(blocks: number, k: number, granule: number): { splits: number; kPerSplit: number } {
  let splits = 1;
  if (blocks < TARGET_WORKGROUPS && k >= 2 * MIN_SPLIT_K) {
    splits = Math.min(Math.ceil(TARGET_WORKGROUPS / blocks), Math.floor(k / MIN_SPLIT_K));
  }
  const kPerSplit = Math.ceil(k / splits / granule) * granule;
  return { splits: Math.ceil(k / kPerSplit), kPerSplit };
}

/** What of the device a plan depends on. */
export interface MatmulDevice {
  /** maxComputeWorkgroupStorageSize */
  readonly maxWorkgroupBytes?: number;
  /** The `subgroups` feature is enabled. */
  readonly subgroups?: boolean;
}

/** Chooses the kernel, its specialisation and its grid for one problem. */
export function planMatmul(p: MatmulProblem, device: MatmulDevice = {}): MatmulPlan {
  const { maxWorkgroupBytes = 16384, subgroups = false } = device;
  const { batch, m, n, k, transA, transB } = p;
  if (batch === 0 || m === 0 || n === 0 || k === 0) return { path: 'empty' };
  const aligned = (offset: number | undefined) => (offset ?? 0) % 16 === 0;
  const off = p.offsets ?? { a: 0, b: 0, y: 0 };
  const vecY = n % 4 === 0 && aligned(off.y) && aligned(off.c) && aligned(off.z);
  // transB reads b and a along K; otherwise b along N.
  const streamVecB = (transB ? k % 4 === 0 : n % 4 === 0) && aligned(off.b);

  if (m === 1) {
    // [K, 1] and [1, K] are the same memory: a is read as untransposed.
    const vecB = streamVecB;
    const vecA = transB && vecB && aligned(off.a);
    const width = vecB ? 4 : 1;
    // The widest row segment that still gives every SM a few workgroups.
    const rowBytes =
      GEMV_AXPY_ROW_BYTES.find((bytes) => Math.ceil((n * 4) / bytes) * batch >= TARGET_WORKGROUPS) ??
      GEMV_AXPY_ROW_BYTES[GEMV_AXPY_ROW_BYTES.length - 1]!;
    const variant = { transB, vecA, vecB, lanes: rowBytes / 4 / width, subgroups };
    const tilesN = Math.ceil(n / gemvColumns(variant));
    const plan = splitK(tilesN * batch, k, 4);
    // The dot kernel writes single columns.
    return { path: 'gemv', variant, vecY: vecY && !transB, tilesM: 1, tilesN, ...plan };
  }

  // Small M with K-major b (the weight layout) streams too; with N-major b,
  // the 64×64 tiles overtake it past M = 4.
  if (m <= (transB ? SMALL_M_MAX : STREAM_ROWS)) {
    const vecB = streamVecB;
    const vecA = transB && vecB && !transA && aligned(off.a);
    const rows = Math.min(STREAM_ROWS, pow2AtLeast(m));
    const shape: StreamShape = transB
      ? SMALL_M_DOT
      : { group: AXPY_LANES, cols: 1, unroll: rows <= 2 ? 4 : 2 };
    const variant = { rows, shape, transA, transB, vecA, vecB };
    const tilesM = Math.ceil(m / rows);
    const tilesN = Math.ceil(n / streamColumns(variant));
    const plan = splitK(tilesM * tilesN * batch, k, 4);
    // The dot kernel writes single columns.
    return { path: 'smallm', variant, vecY: vecY && !transB, tilesM, tilesN, ...plan };
  }

  const large = Math.ceil(m / TILE_LARGE.bm) * Math.ceil(n / TILE_LARGE.bn) * batch >= TARGET_WORKGROUPS / 2;
  const tile = large && tileBytes(TILE_LARGE) <= maxWorkgroupBytes ? TILE_LARGE : TILE_MID;
  // vec4 loads need whole vectors along the contiguous axis of each operand.
  const vecA = (transA ? m % 4 === 0 : k % 4 === 0) && aligned(off.a);
  const vecB = (transB ? k % 4 === 0 : n % 4 === 0) && aligned(off.b);
  const swap = transA && transB;
  const tilesM = Math.ceil((swap ? n : m) / tile.bm);
  const tilesN = Math.ceil((swap ? m : n) / tile.bn);
  const plan = splitK(tilesM * tilesN * batch, k, tile.bk);
  const variant = { tile, swap, transA, transB, vecA, vecB };
  // Swapped tiles write y element by element.
  return { path: 'tile', variant, vecY: vecY && !swap, tilesM, tilesN, ...plan };
}

// ---- encoding ----------------------------------------------------------------------

export type MatmulCall = MatmulLaunch<Operand>;

/** Encodes the plan of one matrix product (and, for linear, its epilogue). */
export function encodeMatmul(encoder: KernelEncoder, call: MatmulCall, kernel: string): void {
  const { a, b, c, y, batch, m, n, k, bias, z } = call;
  const total = batch * m * n;
  if (total === 0) return;
  const epilogue: Epilogue | undefined =
    call.activation === undefined
      ? undefined
      : { bias: bias !== undefined, activation: call.activation, z: z !== undefined };
  // The operands after a and b, in the order `bindings` and `reduceShader` declare them.
  const tail = (first: readonly (Operand | GPUBufferBinding)[]) => [
    ...first,
    ...(c ? [c] : []),
    ...(bias ? [bias] : []),
    y,
    ...(z ? [z] : []),
  ];
  const plan = planMatmul(
    { ...call, offsets: { a: a.offset, b: b.offset, c: c?.offset, y: y.offset, z: z?.offset } },
    {
      maxWorkgroupBytes: encoder.limits.maxComputeWorkgroupStorageSize,
      subgroups: encoder.features.has('subgroups'),
    },
  );
  if (plan.path === 'empty') {
    // K = 0: the product is zero; only beta·c remains.
    encoder.dispatch({
      shader: reduceShader(false, c !== undefined, epilogue, kernel),
      buffers: tail([]),
      params: { layout: REDUCE_PARAMS, values: { total, splits: 0, n, alpha: call.alpha, beta: call.beta } },
      workgroups: elementGrid(encoder, total),
    });
    return;
  }
  const splitting = plan.splits > 1;
  // K splits write raw sums (alpha 1, no c) to scratch, each split its own block.
  const out: Output = splitting
    ? { vec: n % 4 === 0, c: false }
    : { vec: plan.vecY, c: c !== undefined, ...(epilogue ? { epilogue } : {}) };
  const shader =
    plan.path === 'tile'
      ? tileShader({ ...plan.variant, out }, kernel)
      : plan.path === 'gemv'
        ? gemvShader({ ...plan.variant, out }, kernel)
        : streamShader({ ...plan.variant, out }, kernel);
  const values = {
    m,
    n,
    k,
    tilesM: plan.tilesM,
    tilesN: plan.tilesN,
    splits: plan.splits,
    batches: batch,
    kPerSplit: plan.kPerSplit,
    strideA: m * k,
    strideB: k * n,
    strideY: m * n,
    partStride: splitting ? total : 0,
    alpha: splitting ? 1 : call.alpha,
    beta: call.beta,
  };
  const workgroups = gridFor(plan.tilesM * plan.tilesN * plan.splits * batch, encoder.limits);
  if (!splitting) {
    encoder.dispatch({
      shader,
      buffers: tail([a, b]),
      params: { layout: PARAMS, values },
      workgroups,
    });
    return;
  }
  const bytes = plan.splits * total * 4;
  const scratch: GPUBufferBinding = { buffer: encoder.scratch(bytes), offset: 0, size: bytes };
  encoder.dispatch({ shader, buffers: [a, b, scratch], params: { layout: PARAMS, values }, workgroups });
  encoder.dispatch({
    shader: reduceShader(true, c !== undefined, epilogue, kernel),
    buffers: tail([scratch]),
    params: {
      layout: REDUCE_PARAMS,
      values: { total, splits: plan.splits, n, alpha: call.alpha, beta: call.beta },
    },
    workgroups: elementGrid(encoder, total),
  });
}

export const MATMUL_KERNELS: readonly AnyWgpuKernel[] = [
  wgpuKernel(matmul, (encoder, { inputs, outputs, attrs }) => {
    const [a, b, c] = inputs;
    const y = outputs[0]!;
    const [m, n] = y.shape as [number, number];
    const k = attrs.transA ? a!.shape[0]! : a!.shape[1]!;
    encodeMatmul(encoder, { a: a!, b: b!, c, y, batch: 1, m, n, k, ...attrs }, matmul.name);
  }),
  wgpuKernel(batchedMatmul, (encoder, { inputs, outputs, attrs }) => {
    const [a, b] = inputs;
    const y = outputs[0]!;
    const [batch, m, n] = y.shape as [number, number, number];
    const k = attrs.transA ? a!.shape[1]! : a!.shape[2]!;
    encodeMatmul(
      encoder,
      { a: a!, b: b!, c: undefined, y, batch, m, n, k, ...attrs, beta: 0 },
      batchedMatmul.name,
    );
  }),
];
