import { FLOAT, InvalidArgumentError, incrementalAttention, pagedAttention } from '@rayo/core';
import { gridFor, type KernelEncoder, linearWorkgroup, type Operand, wgpuKernel } from '../kernel.js';
import { paramLayout } from '../params.js';
import type { ShaderSource } from '../pipelines.js';
import type { AttentionChunk } from '../tuning.js';
import {
  bindingType,
  halfFunctions,
  loadScalar,
  narrowFunctions,
  quadType,
  type Storage,
  storageOf,
  unpackQuad,
} from '../wgsl/half.js';
import { ShaderModule } from '../wgsl/module.js';
import { vectorOf, WG } from './common.js';
import { encodeWithF32Activations } from './halfEdges.js';
import type { RopeLayout } from './rope.js';
import { declareRopeFrequencies, ropeRotationSource, tableKey } from './ropeRotation.js';

// Flash decoding. The cached tokens of every kv head are split into chunks; a
// workgroup takes one chunk for up to 4 query heads of the same kv head (so
// grouped-query heads share the K and V reads; one head where that leaves
// too few workgroups to fill the GPU) and computes, per head, the
// chunk's score max, its sum of exp and the un-normalised weighted sum of V
// rows. A merge pass per head rescales the partials by exp(max_i − max) and
// normalises. With a single chunk the split pass normalises and writes the
// output itself.
//
// A length held in a device tensor is known only when the shader runs: the
// grid then covers the whole cache, a chunk past the length records an empty
// partial (sum 0) and returns, and the merge leaves empty partials out. A
// length outside 1 … maxSeq reads nothing and leaves NaN (0 / 0) in out.

/** `for` over a compile-time count, emitted unrolled so loads can be issued back to back. */
function unroll(count: number, body: (i: number) => string): string {
  return Array.from({ length: count }, (_, i) => body(i)).join('\n');
}

/**
 * Most query heads one workgroup serves; bounds registers and workgroup
 * memory. A workgroup serving fewer sums more K rows at once instead:
 * ROW_SLOTS = heads × rows per lane group.
 */
const MAX_HEADS_PER_GROUP = 4;
const ROW_SLOTS = MAX_HEADS_PER_GROUP;
/** Tokens a chunk can hold (the scores of a chunk stay in workgroup memory). */
const MAX_CHUNK = 256;
/** Enough workgroups to fill a large GPU before chunks get smaller than 64 tokens. */
const TARGET_WORKGROUPS = 512;
/**
 * Lanes per K row in the score pass: each lane sums at least 4 vectors of the
 * row, at most 8 lanes (128 contiguous bytes per row and load) are reduced.
 */
function kLanes(vectors: number): number {
  return Math.min(vectors, Math.max(4, Math.min(8, Math.floor(vectors / 4))));
}
/** V rows each thread loads per step of the value pass; WIDE_V_ROWS where it serves one or two heads. */
const V_ROWS = 4;
const WIDE_V_ROWS = 8;
/** The q rows live in workgroup memory up to this many floats, else they are read from memory. */
const Q_SHARED_FLOATS = 1024;
const NEG_BIG = '-3.0e38';

const SPLIT_FIELDS = [
  ['group', 'u32'],
  ['blocksPerKv', 'u32'],
  ['blocks', 'u32'],
  ['maxSeq', 'u32'],
  ['seqLen', 'u32'],
  ['chunk', 'u32'],
  ['chunks', 'u32'],
  ['scale', 'f32'],
] as const;

const SPLIT_PARAMS = paramLayout(SPLIT_FIELDS);

/** Paged attention's split pass: the contiguous fields (maxSeq and seqLen unused), then the pools'. */
const PAGED_SPLIT_PARAMS = paramLayout([
  ...SPLIT_FIELDS,
  ['batch', 'u32'],
  ['nHeads', 'u32'],
  ['kvHeads', 'u32'],
  ['pageSize', 'u32'],
  ['maxPages', 'u32'],
  ['numPages', 'u32'],
] as const);

const MERGE_PARAMS = paramLayout([
  ['heads', 'u32'],
  ['chunks', 'u32'],
] as const);

interface SplitConfig {
  readonly headDim: number;
  /** Query heads per workgroup. */
  readonly heads: number;
  /** Normalise and write the output (one chunk) instead of partials. */
  readonly direct: boolean;
  /** The length is read from a device tensor bound after the outputs. */
  readonly device: boolean;
  /** That tensor holds the last row's position: the length is one more (ropeAttention's). */
  readonly fromPosition?: boolean;
  /**
   * ropeAttention in one dispatch: q is the fused q, k, v row (f32, headDim a
   * multiple of 4, q staged in workgroup memory), rotated as it is staged;
   * the workgroup whose chunk holds the position (the last row) rotates the
   * kv head's k and writes it and v into the caches, then a storage barrier,
   * before it reads them. `frequencies` is bound after the length.
   */
  readonly rope?: { readonly layout: RopeLayout; readonly table: boolean };
  /** How the caches are stored (halves in u32 words are widened as loaded). */
  readonly cache: Storage;
  /**
   * The caches are page pools read through block tables (bound after the
   * outputs, then the lengths); sequence b's workgroups follow sequence b − 1's.
   */
  readonly paged?: boolean;
}

/** Tree reduction over `red[h * WG + tid]` for every head; the result lands in `red[h * WG]`. */
function treeReduce(heads: number, op: (a: string, b: string) => string): string {
  return `
  for (var s = ${WG / 2}u; s > 0u; s = s >> 1u) {
    workgroupBarrier();
    if (tid < s) {
${unroll(heads, (h) => `      red[${h * WG}u + tid] = ${op(`red[${h * WG}u + tid]`, `red[${h * WG}u + tid + s]`)};`)}
    }
  }
  workgroupBarrier();`;
}

function splitShader(cfg: SplitConfig): ShaderSource {
  const { headDim: D, heads: HB, direct, cache } = cfg;
  const paged = cfg.paged === true;
  // Paged lengths are on the device too: a chunk past one leaves an empty partial.
  const device = cfg.device || paged;
  // Vector index of row `t` of the chunk.
  const rowOf = (t: string) => (paged ? `pagedRow(tb, g, t0 + ${t})` : `kv + (${t}) * NV`);
  const { width: W, type: VT, zero } = vectorOf(D);
  // Vector (or element) x of a cache, as f32.
  const cacheAt = (name: string, x: string) =>
    W === 4 ? unpackQuad(cache, `${name}[${x}]`) : loadScalar(cache, name, x);
  const cacheType = W === 4 ? quadType(cache) : bindingType(cache, false);
  const NV = D / W;
  // Score pass: LK threads per row, each summing JK vectors of R rows; R · PK rows a pass.
  const LK = kLanes(NV);
  const JK = Math.ceil(NV / LK);
  const PK = Math.floor(WG / LK);
  const R = Math.floor(ROW_SLOTS / HB);
  // Value pass: one thread per vector of a row (up to WG), PV rows at a time, U rows per step.
  const U = R > 1 ? WIDE_V_ROWS : V_ROWS;
  const LV = Math.min(NV, WG);
  const JV = Math.ceil(NV / LV);
  const PV = Math.floor(WG / LV);
  const qShared = HB * D <= Q_SHARED_FLOATS;
  // The rotation happens as q is staged, and the row is written in vectors: without both it would not happen.
  if (cfg.rope && !(qShared && W === 4)) {
    throw new InvalidArgumentError('the split shader rotates q only as it stages it in vectors', {
      operation: 'ropeAttention',
      argument: 'qkv',
      expected: `headDim a multiple of 4 and heads · headDim <= ${Q_SHARED_FLOATS}`,
      actual: `headDim ${D}, ${HB} heads a workgroup`,
    });
  }
  const red = Math.max(R * HB * WG, PV > 1 ? PV * D : 0);
  const dotOf = (a: string, b: string) => (W === 4 ? `dot(${a}, ${b})` : `${a} * ${b}`);
  const qAt = (h: number, x: string) => (qShared ? `qs[${h * NV}u + ${x}]` : `q[qb${h} + ${x}]`);
  const guardK = NV % LK !== 0;
  const guardV = NV % LV !== 0;
  const vLoad = (row: string, j: number) => {
    const x = `vl + ${j * LV}u`;
    return guardV && (j + 1) * LV > NV
      ? `select(${zero}, ${cacheAt('v', `${rowOf(row)} + min(${x}, NV - 1u)`)}, ${x} < NV)`
      : cacheAt('v', `${rowOf(row)} + ${x}`);
  };
  const rope = cfg.rope;
  const ropeKey = rope ? `/rope-${rope.layout}${tableKey(rope.table)}` : '';
  const key = `decoding/incrementalAttention/split/d${D}/h${HB}/k${LK}/r${R}/u${U}/c${MAX_CHUNK}/${direct ? 'direct' : 'partial'}${paged ? '/paged' : device ? (cfg.fromPosition ? '/device-position' : '/device') : ''}${ropeKey}${cache === 'f32' ? '' : `/cache-${cache}`}/wg${WG}`;

  const code = () => {
    const module = new ShaderModule().params(paged ? PAGED_SPLIT_PARAMS : SPLIT_PARAMS);
    module.storage('q', VT, 'read');
    module.storage('k', cacheType, rope ? 'read_write' : 'read');
    module.storage('v', cacheType, rope ? 'read_write' : 'read');
    if (direct) module.storage('out', 'f32', 'read_write');
    else {
      module.storage('stats', 'f32', 'read_write');
      module.storage('partial', 'f32', 'read_write');
    }
    if (paged) {
      module.storage('tables', 'i32', 'read');
      module.storage('lens', 'i32', 'read');
    } else if (device) module.storage('len', 'i32', 'read');
    if (rope) {
      declareRopeFrequencies(module, rope.table);
      module.declare(ropeRotationSource(rope.table));
      if (cache !== 'f32') module.declare(narrowFunctions(cache));
      module.declare(ropeRowSource(rope.layout, D));
    }
    module.declare(`const NV = ${NV}u;`);
    if (paged) module.declare(PAGED_ROW);
    if (qShared) module.workgroupArray('qs', VT, HB * NV);
    module.workgroupArray('red', 'f32', red);
    module.workgroupArray('sc', 'f32', HB * MAX_CHUNK);
    module.declare(halfFunctions(cache));
    return module.build(
      undefined,
      WG,
      `  let tid = lid.x;
  let w = ${linearWorkgroup};
  let blk = w % params.blocks;
${
  paged
    ? `  let c = w / params.blocks % params.chunks;
  let b = w / params.blocks / params.chunks;
  if (b >= params.batch) { return; }
  let tb = b * params.maxPages;`
    : `  let c = w / params.blocks;
  // A grid spread over y may have a few workgroups too many.
  if (c >= params.chunks) { return; }`
}
  let g = blk / params.blocksPerKv;
  let j0 = (blk % params.blocksPerKv) * ${HB}u;
  let h0 = ${paged ? 'b * params.nHeads + ' : ''}g * params.group + j0;
  // Heads past the group (a partial last block) repeat the last one and are not written.
  let nh = min(${HB}u, params.group - j0);
${
  paged
    ? `  let given = lens[b];
  let seqLen = select(0u, u32(given), given >= 1 && u32(given) <= params.maxPages * params.pageSize);`
    : device
      ? `  let given = len[0]${cfg.fromPosition ? ' + 1' : ''};
  let seqLen = select(0u, u32(given), given >= 1 && u32(given) <= params.maxSeq);`
      : '  let seqLen = params.seqLen;'
}
  let t0 = c * params.chunk;
  let nt = select(0u, min(params.chunk, seqLen - t0), t0 < seqLen);
${
  device && !direct
    ? `  if (nt == 0u) {
    if (tid == 0u) {
${unroll(HB, (h) => `      if (${h}u < nh) { let at = ((h0 + ${h}u) * params.chunks + c) * 2u; stats[at] = ${NEG_BIG}; stats[at + 1u] = 0.0; }`)}
    }
    return;
  }`
    : ''
}
${paged ? '' : '  let kv = (g * params.maxSeq + t0) * NV;\n'}${unroll(HB, (h) => `  let qb${h} = (h0 + min(${h}u, nh - 1u)) * NV;`)}
${rope ? newRowWrite(cache) : ''}
${
  qShared
    ? `  for (var i = tid; i < ${HB * NV}u; i += ${WG}u) {
    let h = i / NV;
    qs[i] = ${rope ? 'rotatedQuad(h0 + min(h, nh - 1u), i % NV, seqLen - 1u)' : 'q[(h0 + min(h, nh - 1u)) * NV + i % NV]'};
  }
  workgroupBarrier();`
    : ''
}

  // Scores: ${LK} lanes per K row, ${R} rows each, ${R * PK} rows a pass. Rows
  // past the chunk read its last row (all loads issue unconditionally) and are not kept.
  let kl = tid % ${LK}u;
  let kr = tid / ${LK}u;
  for (var p0 = 0u; p0 < nt; p0 += ${R * PK}u) {
${unroll(
  R,
  (r) => `    let tk${r} = p0 + ${r * PK}u + kr;
    let row${r} = ${paged ? `pagedRow(tb, g, t0 + min(tk${r}, nt - 1u))` : `kv + min(tk${r}, nt - 1u) * NV`};`,
)}
${unroll(R, (r) => unroll(HB, (h) => `    var s${h}_${r} = 0.0;`))}
${unroll(JK, (j) => {
  const x = `kl + ${j * LK}u`;
  const loads = unroll(R, (r) => `let k${j}_${r} = ${cacheAt('k', `row${r} + ${x}`)};`);
  const dots = unroll(R, (r) => unroll(HB, (h) => `s${h}_${r} += ${dotOf(`k${j}_${r}`, qAt(h, x))};`));
  const body = `${loads}\n${dots}`;
  return guardK && (j + 1) * LK > NV ? `    if (${x} < NV) {\n${body}\n    }` : `    {\n${body}\n    }`;
})}
${
  LK > 1
    ? `${unroll(R, (r) => unroll(HB, (h) => `    red[${(r * HB + h) * WG}u + tid] = s${h}_${r};`))}
    workgroupBarrier();
    for (var e = tid; e < ${R * HB * PK}u; e += ${WG}u) {
      let slot = e / ${PK}u;
      let i = e % ${PK}u;
      let t = p0 + slot / ${HB}u * ${PK}u + i;
      if (t < nt) {
        let at = slot * ${WG}u + i * ${LK}u;
        sc[slot % ${HB}u * ${MAX_CHUNK}u + t] = params.scale * (${Array.from({ length: LK }, (_, l) => `red[at + ${l}u]`).join(' + ')});
      }
    }
    workgroupBarrier();`
    : unroll(
        R,
        (r) =>
          `    if (kr < ${PK}u && tk${r} < nt) {\n${unroll(HB, (h) => `      sc[${h * MAX_CHUNK}u + tk${r}] = params.scale * s${h}_${r};`)}\n    }`,
      )
}
  }
  workgroupBarrier();

  // Value pass: rows past the chunk read its last row (so a step's loads
  // issue unconditionally) and weigh 0. The first step's rows are loaded
  // before the softmax, overlapping its barriers.
  let vl = tid % ${LV}u;
  let vr = tid / ${LV}u;
  let last = max(nt, 1u) - 1u;
${unroll(U, (u) => unroll(JV, (j) => `  var p${u}_${j} = ${vLoad(`min(vr + ${u * PV}u, last)`, j)};`))}

  // Softmax statistics of the chunk, every head at once.
${unroll(HB, (h) => `  var m${h} = ${NEG_BIG};`)}
  for (var t = tid; t < nt; t += ${WG}u) {
${unroll(HB, (h) => `    m${h} = max(m${h}, sc[${h * MAX_CHUNK}u + t]);`)}
  }
${unroll(HB, (h) => `  red[${h * WG}u + tid] = m${h};`)}
${treeReduce(HB, (a, b) => `max(${a}, ${b})`)}
${unroll(HB, (h) => `  let mx${h} = red[${h * WG}u];`)}
  workgroupBarrier();
${unroll(HB, (h) => `  var l${h} = 0.0;`)}
  for (var t = tid; t < nt; t += ${WG}u) {
${unroll(HB, (h) => `    { let e = exp(sc[${h * MAX_CHUNK}u + t] - mx${h}); sc[${h * MAX_CHUNK}u + t] = e; l${h} += e; }`)}
  }
${unroll(HB, (h) => `  red[${h * WG}u + tid] = l${h};`)}
${treeReduce(HB, (a, b) => `${a} + ${b}`)}
${unroll(HB, (h) => `  let sum${h} = red[${h * WG}u];`)}

  // Weighted sum of V rows: one thread per vector of a row, ${PV} rows at a time, ${U} rows per step.
${unroll(HB, (h) => unroll(JV, (j) => `  var a${h}_${j} = ${zero};`))}
  if (vr < ${PV}u) {
    for (var tv = vr; tv < nt; tv += ${U * PV}u) {
${unroll(
  U,
  (u) => `      let tw${u} = tv + ${u * PV}u;
${unroll(HB, (h) => `      let w${h}_${u} = select(0.0, sc[${h * MAX_CHUNK}u + min(tw${u}, last)], tw${u} < nt);`)}`,
)}
${unroll(HB, (h) => unroll(JV, (j) => unroll(U, (u) => `      a${h}_${j} += w${h}_${u} * p${u}_${j};`)))}
      // The next step's rows.
${unroll(U, (u) => unroll(JV, (j) => `      p${u}_${j} = ${vLoad(`min(tv + ${(U + u) * PV}u, last)`, j)};`))}
    }
  }
${
  direct
    ? ''
    : `  if (tid == 0u) {
${unroll(HB, (h) => `    if (${h}u < nh) { let at = ((h0 + ${h}u) * params.chunks + c) * 2u; stats[at] = mx${h}; stats[at + 1u] = sum${h}; }`)}
  }`
}
${
  PV === 1
    ? unroll(HB, (h) => {
        // One row at a time: every thread holds whole sums already.
        const dst = (d: string) =>
          direct
            ? `out[(h0 + ${h}u) * ${D}u + ${d}]`
            : `partial[((h0 + ${h}u) * params.chunks + c) * ${D}u + ${d}]`;
        return `  if (${h}u < nh) {
${unroll(JV, (j) => {
  const x = `vl + ${j * LV}u`;
  const stores = unroll(W, (cmp) => {
    const a = W === 4 ? `a${h}_${j}[${cmp}]` : `a${h}_${j}`;
    return `      ${dst(`(${x}) * ${W}u + ${cmp}u`)} = ${direct ? normalised(a, `sum${h}`, paged) : a};`;
  });
  return guardV && (j + 1) * LV > NV ? `    if (${x} < NV) {\n${stores}\n    }` : `    {\n${stores}\n    }`;
})}
  }`;
      })
    : // Rows are summed through workgroup memory, one head after the other; a
      // loop (not unrolled here) keeps the barriers few for shader compilers.
      `  for (var h = 0u; h < ${HB}u; h++) {
    var acc = a0_0;
    var total = sum0;
${unroll(HB - 1, (i) => `    if (h == ${i + 1}u) { acc = a${i + 1}_0; total = sum${i + 1}; }`)}
    workgroupBarrier();
    if (vr < ${PV}u) {
${unroll(W, (cmp) => `      red[vr * ${D}u + vl * ${W}u + ${cmp}u] = ${W === 4 ? `acc[${cmp}]` : 'acc'};`)}
    }
    workgroupBarrier();
    if (h < nh) {
      for (var d = tid; d < ${D}u; d += ${WG}u) {
        var o = 0.0;
        for (var r = 0u; r < ${PV}u; r++) { o += red[r * ${D}u + d]; }
        ${direct ? `out[(h0 + h) * ${D}u + d] = ${normalised('o', 'total', paged)};` : `partial[((h0 + h) * params.chunks + c) * ${D}u + d] = o;`}
      }
    }
  }`
}`,
    );
  };
  return { key, kernel: 'incrementalAttention', code };
}

/**
 * WGSL: `rotatedQuad(row, x, position)`, vector x of row `row` of the fused
 * q, k, v input (bound as vec4<f32> `q`) rotated at `position` as `rope`
 * rotates it, each element from its pair's two elements.
 */
function ropeRowSource(layout: RopeLayout, headDim: number): string {
  const half = headDim / 2;
  const [pair, first, isFirst] =
    layout === 'half' ? [`d % ${half}u`, 'pair', `d < ${half}u`] : ['d / 2u', '2u * pair', 'd % 2u == 0u'];
  const second = layout === 'half' ? `pair + ${half}u` : '2u * pair + 1u';
  return `fn qkvAt(row: u32, d: u32) -> f32 { let e = row * ${headDim}u + d; return q[e / 4u][e % 4u]; }
fn rotatedElement(row: u32, d: u32, position: u32) -> f32 {
  let pair = ${pair};
  let a = qkvAt(row, ${first});
  let b = qkvAt(row, ${second});
  let r = ropeRotation(position, pair, 1.0);
  return select(a * r.y + b * r.x, a * r.x - b * r.y, ${isFirst});
}
fn rotatedQuad(row: u32, x: u32, position: u32) -> vec4<f32> {
  return vec4<f32>(rotatedElement(row, 4u * x, position), rotatedElement(row, 4u * x + 1u, position),
    rotatedElement(row, 4u * x + 2u, position), rotatedElement(row, 4u * x + 3u, position));
}`;
}

/**
 * WGSL: ropeAttention's row write, for every workgroup: the one whose chunk
 * holds the position (seqLen − 1) stores the kv head g's rotated k and its v
 * (rows nHeads + g and nHeads + kvHeads + g of the fused input) as vectors of
 * the caches' row, rounded once to a half cache; then every invocation meets
 * at a storage barrier, after which the workgroup's reads see the row.
 */
function newRowWrite(cache: Storage): string {
  const store = (value: string) =>
    cache === 'f32'
      ? value
      : `vec2<u32>(to_${cache}(${value}.x) | (to_${cache}(${value}.y) << 16u), to_${cache}(${value}.z) | (to_${cache}(${value}.w) << 16u))`;
  return `  // ropeAttention: the new row, from the chunk that holds it.
  let kvHeads = params.blocks / params.blocksPerKv;
  let kRow = params.group * kvHeads + g;
  let position = seqLen - 1u;
  if (seqLen >= 1u && position >= t0 && position - t0 < params.chunk) {
    let rowAt = (g * params.maxSeq + position) * NV;
    for (var x = tid; x < NV; x += ${WG}u) {
      let kq = rotatedQuad(kRow, x, position);
      k[rowAt + x] = ${store('kq')};
      let vq = q[(kRow + kvHeads) * NV + x];
      v[rowAt + x] = ${store('vq')};
    }
  }
  storageBarrier();`;
}

/** WGSL: `value / sum`, or with `zeroEmpty` 0 where nothing was attended (sum 0, an idle sequence). */
function normalised(value: string, sum: string, zeroEmpty: boolean): string {
  return zeroEmpty ? `select(0.0, ${value} / ${sum}, ${sum} > 0.0)` : `${value} / ${sum}`;
}

/**
 * WGSL: the vector index of row t of sequence tb / maxPages's kv head g, in
 * page tables[tb + t / pageSize]; a page outside the pool reads page 0 (the
 * result is then unspecified, but nothing outside the pool is read).
 */
const PAGED_ROW = `fn pagedRow(tb: u32, g: u32, t: u32) -> u32 {
  let entry = tables[tb + t / params.pageSize];
  let page = select(0u, u32(entry), entry >= 0 && u32(entry) < params.numPages);
  return ((page * params.kvHeads + g) * params.pageSize + t % params.pageSize) * NV;
}`;

function mergeShader(headDim: number, zeroEmpty = false): ShaderSource {
  const { width: W, type: VT, zero } = vectorOf(headDim);
  const NV = headDim / W;
  const LM = Math.min(NV, WG);
  const JM = Math.ceil(NV / LM);
  const SM = Math.floor(WG / LM);
  return {
    key: `decoding/incrementalAttention/merge/d${headDim}${zeroEmpty ? '/zero' : ''}/wg${WG}`,
    kernel: 'incrementalAttention',
    code: () => {
      const module = new ShaderModule().params(MERGE_PARAMS);
      module.storage('stats', 'f32', 'read');
      module.storage('partial', VT, 'read');
      module.storage('out', VT, 'read_write');
      module.declare(`const NV = ${NV}u;`);
      module.workgroupArray('red', 'f32', WG);
      module.workgroupArray('ored', VT, WG);
      return module.build(
        undefined,
        WG,
        `  let tid = lid.x;
  let h = ${linearWorkgroup};
  if (h >= params.heads) { return; }
  let n = params.chunks;
  let base = h * n;
  var m = ${NEG_BIG};
  for (var i = tid; i < n; i += ${WG}u) { m = max(m, stats[(base + i) * 2u]); }
  red[tid] = m;
${treeReduce(1, (a, b) => `max(${a}, ${b})`)}
  let mx = red[0];
  workgroupBarrier();
  var l = 0.0;
  for (var i = tid; i < n; i += ${WG}u) { l += exp(stats[(base + i) * 2u] - mx) * stats[(base + i) * 2u + 1u]; }
  red[tid] = l;
${treeReduce(1, (a, b) => `${a} + ${b}`)}
  let total = red[0];

  // ${SM} slices of the chunks, one thread per vector of the row in each.
  let x0 = tid % ${LM}u;
  let slice = tid / ${LM}u;
${unroll(
  JM,
  (j) => `  {
    let x = x0 + ${j * LM}u;
    var o = ${zero};
    if (slice < ${SM}u && x < NV) {
      for (var i = slice; i < n; i += ${SM}u) {
        // An empty chunk (sum 0) has no partial to read (a branch, not a select: it reads nothing).
        if (stats[(base + i) * 2u + 1u] > 0.0) {
          o += exp(stats[(base + i) * 2u] - mx) * partial[(base + i) * NV + x];
        }
      }
    }
    ored[tid] = o;
    workgroupBarrier();
    if (slice == 0u && x < NV) {
      var sum = ${zero};
      for (var s = 0u; s < ${SM}u; s++) { sum += ored[s * ${LM}u + x0]; }
      out[h * NV + x] = ${zeroEmpty ? `select(${zero}, sum / total, total > 0.0)` : 'sum / total'};
    }
    workgroupBarrier();
  }`,
)}`,
      );
    },
  };
}

/**
 * Chunk length: `forced` where given; else one chunk up to MAX_CHUNK tokens
 * (a second dispatch to merge chunks costs more than the workgroups it
 * adds), past that the longest of 256, 128, 64 tokens that still gives
 * enough workgroups.
 */
function chunkFor(seqLen: number, blocks: number, forced: AttentionChunk | undefined): number {
  if (forced !== undefined) return forced;
  if (seqLen <= MAX_CHUNK) return MAX_CHUNK;
  for (const chunk of [MAX_CHUNK, MAX_CHUNK / 2]) {
    if (blocks * Math.ceil(seqLen / chunk) >= TARGET_WORKGROUPS) return chunk;
  }
  return MAX_CHUNK / 4;
}

/** Half caches are read as stored; a half q and out go through f32 (one row per head). */
export const attentionKernel = wgpuKernel(
  incrementalAttention,
  (encoder, { inputs, outputs, attrs }) =>
    encodeIncrementalAttention(encoder, inputs as Operand[], outputs[0]!, attrs),
  { dtypes: FLOAT },
);

/**
 * incrementalAttention's dispatches for q, the caches and the device length
 * (where given) into `out`; `fromPosition`: that tensor holds the last row's
 * position, one less than the length (ropeAttention's second pass).
 */
export function encodeIncrementalAttention(
  encoder: KernelEncoder,
  [q, k, v, length]: readonly (Operand | undefined)[],
  out: Operand,
  attrs: { readonly seqLen: number; readonly scale: number },
  fromPosition = false,
): void {
  encodeWithF32Activations(encoder, incrementalAttention.name, { q: q! }, { out }, (i, o) =>
    encodeAttention(encoder, i.q, k!, v!, length, o.out, attrs, fromPosition),
  );
}

/** ropeAttention's rotation, for the split shader that does it all (see SplitConfig.rope). */
export interface RopeInAttention {
  readonly layout: RopeLayout;
  readonly table: boolean;
  readonly frequencies: Operand | GPUBufferBinding;
}

/**
 * Whether the split shader can take ropeAttention whole: an f32 fused row
 * read as vectors and q staged in workgroup memory (headDim a multiple of 4,
 * the heads a workgroup serves within Q_SHARED_FLOATS).
 */
export function attentionTakesRope(qkv: Operand, nHeads: number, nKvHeads: number, headDim: number): boolean {
  const heads = headsPerWorkgroup(nHeads / nKvHeads, MAX_HEADS_PER_GROUP);
  return qkv.dtype === 'f32' && headDim % 4 === 0 && heads * headDim <= Q_SHARED_FLOATS;
}

/** ropeAttention in one split pass (and its merge): the fused row as q, the caches written, the length from the position. */
export function encodeRopeAttention(
  encoder: KernelEncoder,
  [qkv, k, v, position]: readonly (Operand | undefined)[],
  out: Operand,
  attrs: { readonly seqLen: number; readonly scale: number },
  rope: RopeInAttention,
): void {
  const [nHeads, headDim] = out.shape as [number, number];
  encodeAttention(
    encoder,
    { ...qkv!, shape: [nHeads, headDim] },
    k!,
    v!,
    position,
    out,
    attrs,
    position !== undefined,
    rope,
  );
}

function encodeAttention(
  encoder: KernelEncoder,
  q: Operand,
  k: Operand,
  v: Operand,
  length: Operand | undefined,
  out: Operand,
  attrs: { readonly seqLen: number; readonly scale: number },
  fromPosition: boolean,
  rope?: RopeInAttention,
): void {
  const [nHeads, headDim] = out.shape as [number, number];
  const [nKvHeads, maxSeq] = k.shape as [number, number, number];
  if (out.size === 0) return;
  // A length on the device: size the grid by the cache, its bound.
  const seqLen = length ? maxSeq : attrs.seqLen;
  const plan = planSplit(nHeads, nKvHeads, seqLen, 1, encoder.tuning.attentionChunk);
  const values = { ...plan.values, maxSeq, seqLen, scale: scaleOf(attrs.scale, headDim) };
  const device = length !== undefined;
  const after = [...(length ? [length] : []), ...(rope ? [rope.frequencies] : [])];
  dispatchAttention(encoder, { q, k, v, out }, after, {
    shader: {
      headDim,
      heads: plan.heads,
      direct: plan.direct,
      device,
      fromPosition,
      cache: storageOf(k.dtype),
      ...(rope ? { rope: { layout: rope.layout, table: rope.table } } : {}),
    },
    params: { layout: SPLIT_PARAMS, values },
    workgroups: plan.workgroups,
    rows: nHeads,
  });
}

function scaleOf(scale: number, headDim: number): number {
  return scale === 0 ? 1 / Math.sqrt(headDim) : scale;
}

/**
 * Workgroups of up to MAX_HEADS_PER_GROUP query heads of one kv head (or of
 * one head, below TARGET_WORKGROUPS), over chunks of at most `seqLen` tokens,
 * for each of `batch` sequences.
 */
function planSplit(
  nHeads: number,
  nKvHeads: number,
  seqLen: number,
  batch: number,
  forcedChunk?: AttentionChunk,
) {
  const shared = planFor(nHeads, nKvHeads, seqLen, batch, MAX_HEADS_PER_GROUP, forcedChunk);
  // Too few workgroups to fill the GPU (a short cache, one sequence): each
  // workgroup's chain of loads and barriers sets the time, so one head a
  // workgroup, its kv head's rows read once a head (mostly from L2).
  return shared.workgroups >= TARGET_WORKGROUPS
    ? shared
    : planFor(nHeads, nKvHeads, seqLen, batch, 1, forcedChunk);
}

/** Query heads a workgroup serves when it serves at most `most` of a group. */
function headsPerWorkgroup(group: number, most: number): number {
  return Math.ceil(group / Math.ceil(group / most));
}

/** planSplit's plan with at most `mostHeads` query heads a workgroup. */
function planFor(
  nHeads: number,
  nKvHeads: number,
  seqLen: number,
  batch: number,
  mostHeads: number,
  forcedChunk: AttentionChunk | undefined,
) {
  const group = nHeads / nKvHeads;
  const blocksPerKv = Math.ceil(group / mostHeads);
  const blocks = nKvHeads * blocksPerKv;
  const chunk = chunkFor(seqLen, blocks * batch, forcedChunk);
  const chunks = Math.ceil(seqLen / chunk);
  return {
    heads: headsPerWorkgroup(group, mostHeads),
    direct: chunks === 1,
    values: { group, blocksPerKv, blocks, chunk, chunks },
    workgroups: blocks * chunks * batch,
  };
}

interface SplitCall {
  readonly shader: SplitConfig;
  readonly params: {
    readonly layout: typeof SPLIT_PARAMS | typeof PAGED_SPLIT_PARAMS;
    readonly values: Readonly<Record<string, number>> & { readonly chunks: number };
  };
  readonly workgroups: number;
  /** Query heads of all sequences: the merge's rows. */
  readonly rows: number;
}

/** The split pass into `out` (one chunk) or into partials, then their merge into `out`. */
function dispatchAttention(
  encoder: KernelEncoder,
  { q, k, v, out }: Readonly<Record<'q' | 'k' | 'v' | 'out', Operand>>,
  after: readonly (Operand | GPUBufferBinding)[],
  call: SplitCall,
): void {
  const { headDim, direct } = call.shader;
  const shader = splitShader(call.shader);
  const workgroups = gridFor(call.workgroups, encoder.limits);
  if (direct) {
    encoder.dispatch({ shader, buffers: [q, k, v, out, ...after], params: call.params, workgroups });
    return;
  }
  const { chunks } = call.params.values;
  const statBytes = call.rows * chunks * 2 * 4;
  const partialBytes = call.rows * chunks * headDim * 4;
  const stats = { buffer: encoder.scratch(statBytes), offset: 0, size: statBytes };
  const partial = { buffer: encoder.scratch(partialBytes), offset: 0, size: partialBytes };
  encoder.dispatch({ shader, buffers: [q, k, v, stats, partial, ...after], params: call.params, workgroups });
  encoder.dispatch({
    shader: mergeShader(headDim, call.shader.paged === true),
    buffers: [stats, partial, out],
    params: { layout: MERGE_PARAMS, values: { heads: call.rows, chunks } },
    workgroups: gridFor(call.rows, encoder.limits),
  });
}

/**
 * pagedAttention: the split pass over page pools, sequence b's workgroups
 * after sequence b − 1's, chunks planned for the block tables' capacity (the
 * lengths are on the device); a half q and out go through f32.
 */
export const pagedAttentionKernel = wgpuKernel(
  pagedAttention,
  (encoder, { inputs, outputs, attrs }) => {
    const [, kPages, vPages, tables, lens] = inputs as Operand[];
    encodeWithF32Activations(
      encoder,
      pagedAttention.name,
      { q: inputs[0]! },
      { out: outputs[0]! },
      (i, o) => {
        const [batch, nHeads, headDim] = o.out.shape as [number, number, number];
        const [numPages, kvHeads, pageSize] = kPages!.shape as [number, number, number, number];
        const maxPages = tables!.shape[1]!;
        if (o.out.size === 0) return;
        const plan = planSplit(nHeads, kvHeads, maxPages * pageSize, batch, encoder.tuning.attentionChunk);
        const paging = { batch, nHeads, kvHeads, pageSize, maxPages, numPages };
        const values = {
          ...plan.values,
          maxSeq: 0,
          seqLen: 0,
          scale: scaleOf(attrs.scale, headDim),
          ...paging,
        };
        const cache = storageOf(kPages!.dtype);
        dispatchAttention(encoder, { q: i.q, k: kPages!, v: vPages!, out: o.out }, [tables!, lens!], {
          shader: { headDim, heads: plan.heads, direct: plan.direct, device: false, cache, paged: true },
          params: { layout: PAGED_SPLIT_PARAMS, values },
          workgroups: plan.workgroups,
          rows: batch * nHeads,
        });
      },
    );
  },
  { dtypes: FLOAT },
);
