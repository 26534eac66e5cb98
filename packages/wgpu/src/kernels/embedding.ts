import { embedding, embeddingBackward, FLOAT, isHalf } from '@rayo/core';
import {
  type AnyWgpuKernel,
  gridFor,
  type KernelEncoder,
  linearWorkgroup,
  type Operand,
  wgpuKernel,
} from '../kernel.js';
import { type ParamLayout, paramLayout } from '../params.js';
import type { ShaderSource } from '../pipelines.js';
import { rowPieces, rowsOf } from '../rowPieces.js';
import type { GPUBuffer } from '../webgpuTypes.js';
import { ShaderModule } from '../wgsl/module.js';
import { elementGrid, elementIndex, WG } from './common.js';
import { encodeWithF32Activations } from './halfEdges.js';

// An id outside [0, V) is compared as u32 (negative ids wrap to huge values),
// never turned into an offset first, so no id can alias a valid row. A table
// (or y) larger than one binding is bound in pieces of whole rows, a
// dispatch each, as the quantized lookup does: a dispatch writes the
// elements whose id lies in its rows, the first also the NaN ones.

/** A quiet NaN read from a private variable: WGSL rejects NaN in constant expressions. */
const NAN_DECL = 'var<private> nanBits: u32 = 0x7fc00000u;';
const NAN = 'bitcast<f32>(nanBits)';
const vtype = (vec: number) => (vec === 4 ? 'vec4<f32>' : 'f32');
const vsplat = (vec: number, e: string) => (vec === 4 ? `vec4<f32>(${e})` : e);

/**
 * A shader of `kernel` with `layout` as its params: `declare` adds its
 * bindings and declarations, `body` runs on WG invocations.
 */
function shaderOf(
  kernel: 'embedding' | 'embeddingBackward',
  key: string,
  layout: ParamLayout<string>,
  declare: (module: ShaderModule) => void,
  body: string,
): ShaderSource {
  return {
    key: `embedding/${kernel}/${key}`,
    kernel,
    code: () => {
      const module = new ShaderModule().params(layout);
      declare(module);
      return module.build(undefined, WG, body);
    },
  };
}

// ---- forward: a gather, one invocation per output element (or vec4) ---------

const GATHER_PARAMS = paramLayout([
  ['count', 'u32'],
  ['dv', 'u32'],
  ['vocab', 'u32'],
  /** The id of y's element 0 in the bound ids (a later piece of the lookups where y is split). */
  ['idBase', 'u32'],
  /** The table rows this dispatch binds: [rowStart, rowStart + rowCount) of V. */
  ['rowStart', 'u32'],
  ['rowCount', 'u32'],
  /** 1 for the dispatch that writes the NaN rows of ids outside [0, V). */
  ['first', 'u32'],
] as const);

/** WGSL: the id of element (or vector) e, and whether this dispatch writes it. */
const OWNS = `fn id_of(e: u32) -> u32 { return bitcast<u32>(ids[params.idBase + e / params.dv]); }
fn owns(id: u32) -> bool {
  if (id >= params.vocab) { return params.first != 0u; }
  return id - params.rowStart < params.rowCount;
}`;

function gatherShader(vec: number) {
  const V = vtype(vec);
  return shaderOf(
    'embedding',
    `v${vec}/wg${WG}`,
    GATHER_PARAMS,
    (module) => {
      module.storage('table', V, 'read');
      module.storage('ids', 'i32', 'read');
      module.storage('y', V, 'read_write');
      module.declare(NAN_DECL).declare(OWNS);
    },
    `  ${elementIndex('params.count')}
  let id = id_of(i);
  if (!owns(id)) { return; }
  if (id < params.vocab) {
    y[i] = table[(id - params.rowStart) * params.dv + i % params.dv];
  } else {
    y[i] = ${vsplat(vec, NAN)};
  }`,
  );
}

/**
 * The gather of a half table: bit copies, no conversion. Rows of a multiple
 * of 8 halves go a vec4<u32> (8 halves) per invocation; otherwise an
 * invocation assembles one u32 word of y from its two elements (the upper
 * half of a last, odd word is left as it was). An id outside the table
 * gives the dtype's quiet NaN.
 */
function halfGatherShader(dtype: 'f16' | 'bf16', vec: boolean) {
  const nan = dtype === 'f16' ? '0x7e00u' : '0x7fc0u';
  const body = vec
    ? `${elementIndex('params.count')}
  let id = id_of(i);
  if (!owns(id)) { return; }
  if (id < params.vocab) {
    y[i] = table[(id - params.rowStart) * params.dv + i % params.dv];
  } else {
    y[i] = vec4<u32>(${nan} | (${nan} << 16u));
  }`
    : `${elementIndex('(params.count + 1u) / 2u')}
  let first = 2u * i;
  let own0 = owns(id_of(first));
  let own1 = first + 1u < params.count && owns(id_of(first + 1u));
  if (!own0 && !own1) { return; }
  // A half another piece of the table writes (or past the end) is kept as it is.
  let word = y[i];
  let lo = select(word & 0xffffu, element(first), own0);
  let hi = select(word >> 16u, element(first + 1u), own1);
  y[i] = lo | (hi << 16u);`;
  return {
    key: `embedding/embedding/${dtype}/${vec ? 'v8' : 'words'}/wg${WG}`,
    kernel: 'embedding',
    code: () => {
      const module = new ShaderModule();
      module.storage('table', vec ? 'vec4<u32>' : 'u32', 'read');
      module.storage('ids', 'i32', 'read');
      module.storage('y', vec ? 'vec4<u32>' : 'u32', 'read_write');
      module.declare(OWNS);
      if (!vec) {
        module.declare(`/** The bits of element e of y (of a row this dispatch binds, or NaN). */
fn element(e: u32) -> u32 {
  let id = id_of(e);
  if (id >= params.vocab) { return ${nan}; }
  let t = (id - params.rowStart) * params.dv + e % params.dv;
  return (table[t >> 1u] >> ((t & 1u) * 16u)) & 0xffffu;
}`);
      }
      return module.build(GATHER_PARAMS, WG, body);
    },
  };
}

// ---- backward: a stable sort of the positions by id, then per-row sums -------
//
// Positions are sorted by id with a stable LSD radix sort (8-bit digits; block
// histograms, one scan, a scatter ranking each element among equal digits of
// its block in position order). Every dtable element then adds the dy rows of
// its id's positions in increasing position order, exactly the reference's
// order, with no float atomics. Ids outside the table get the key V, sort
// last, and poison the whole table.

const DIGITS = 256;
/** Positions per sort block: WG invocations with ROUNDS positions each. */
const ROUNDS = 4;
const BLOCK = WG * ROUNDS;
/** Elements per invocation and tile of the single-workgroup scan. */
const SCAN_PER_THREAD = 8;

const SORT_PARAMS = paramLayout([
  ['n', 'u32'],
  ['blocks', 'u32'],
  ['shift', 'u32'],
  ['vocab', 'u32'],
] as const);

const keysShader = shaderOf(
  'embeddingBackward',
  `keys/wg${WG}`,
  SORT_PARAMS,
  (module) => {
    module.storage('ids', 'i32', 'read');
    module.storage('keys', 'u32', 'read_write');
    module.storage('pos', 'u32', 'read_write');
  },
  `  ${elementIndex('params.n')}
  keys[i] = min(bitcast<u32>(ids[i]), params.vocab);
  pos[i] = i;`,
);

const histogramShader = shaderOf(
  'embeddingBackward',
  `histogram/b${BLOCK}`,
  SORT_PARAMS,
  (module) => {
    module.storage('keys', 'u32', 'read');
    module.storage('hist', 'u32', 'read_write');
    module.workgroupArray('counts', 'atomic<u32>', DIGITS);
  },
  `  let block = ${linearWorkgroup};
  if (block >= params.blocks) { return; }
  let t = lid.x;
  atomicStore(&counts[t], 0u);
  workgroupBarrier();
  for (var k = 0u; k < ${ROUNDS}u; k++) {
    let idx = block * ${BLOCK}u + k * ${WG}u + t;
    if (idx < params.n) { atomicAdd(&counts[(keys[idx] >> params.shift) & 255u], 1u); }
  }
  workgroupBarrier();
  // Digit-major, so one scan gives every (digit, block) its first slot.
  hist[t * params.blocks + block] = atomicLoad(&counts[t]);`,
);

/** Exclusive scan of `hist` (DIGITS · blocks entries) in one workgroup, a tile at a time. */
const scanShader = shaderOf(
  'embeddingBackward',
  `scan/wg${WG}/p${SCAN_PER_THREAD}`,
  SORT_PARAMS,
  (module) => {
    module.storage('hist', 'u32', 'read_write');
    module.workgroupArray('sums', 'u32', WG);
  },
  `  let t = lid.x;
  let total = params.blocks * ${DIGITS}u;
  var carry = 0u;
  for (var tile = 0u; tile < total; tile += ${WG * SCAN_PER_THREAD}u) {
    let first = tile + t * ${SCAN_PER_THREAD}u;
    var vals: array<u32, ${SCAN_PER_THREAD}>;
    var own = 0u;
    for (var k = 0u; k < ${SCAN_PER_THREAD}u; k++) {
      let idx = first + k;
      vals[k] = select(0u, hist[min(idx, total - 1u)], idx < total);
      own += vals[k];
    }
    sums[t] = own;
    workgroupBarrier();
    for (var off = 1u; off < ${WG}u; off <<= 1u) {
      let add = select(0u, sums[t - min(off, t)], t >= off);
      workgroupBarrier();
      sums[t] += add;
      workgroupBarrier();
    }
    var running = carry + sums[t] - own;
    for (var k = 0u; k < ${SCAN_PER_THREAD}u; k++) {
      let idx = first + k;
      if (idx < total) { hist[idx] = running; }
      running += vals[k];
    }
    carry += sums[${WG - 1}];
    workgroupBarrier();
  }`,
);

const scatterShader = shaderOf(
  'embeddingBackward',
  `scatter/b${BLOCK}`,
  SORT_PARAMS,
  (module) => {
    module.storage('keysIn', 'u32', 'read');
    module.storage('posIn', 'u32', 'read');
    module.storage('hist', 'u32', 'read');
    module.storage('keysOut', 'u32', 'read_write');
    module.storage('posOut', 'u32', 'read_write');
    module.workgroupArray('digits', 'u32', WG);
    module.workgroupArray('running', 'u32', DIGITS);
  },
  `  let block = ${linearWorkgroup};
  if (block >= params.blocks) { return; }
  let t = lid.x;
  running[t] = 0u;
  for (var rnd = 0u; rnd < ${ROUNDS}u; rnd++) {
    let idx = block * ${BLOCK}u + rnd * ${WG}u + t;
    let valid = idx < params.n;
    var key = 0u;
    var d = ${DIGITS}u; // matches no digit
    if (valid) {
      key = keysIn[idx];
      d = (key >> params.shift) & 255u;
    }
    digits[t] = d;
    workgroupBarrier();
    // Stable rank: equal digits earlier in the block go first.
    var before = 0u;
    var after = 0u;
    for (var u = 0u; u < ${WG}u; u++) {
      let same = digits[u] == d;
      before += select(0u, 1u, same && u < t);
      after += select(0u, 1u, same && u > t);
    }
    if (valid) {
      let dst = hist[d * params.blocks + block] + running[d] + before;
      keysOut[dst] = key;
      posOut[dst] = posIn[idx];
    }
    workgroupBarrier();
    if (valid && after == 0u) { running[d] += before + 1u; }
    workgroupBarrier();
  }`,
);

/** starts[v] = the first sorted slot with key >= v, for v in [0, V]. */
const startsShader = shaderOf(
  'embeddingBackward',
  `starts/wg${WG}`,
  SORT_PARAMS,
  (module) => {
    module.storage('keys', 'u32', 'read');
    module.storage('starts', 'u32', 'read_write');
  },
  `  ${elementIndex('params.vocab + 1u')}
  var lo = 0u;
  var hi = params.n;
  while (lo < hi) {
    let mid = (lo + hi) / 2u;
    if (keys[mid] < i) { lo = mid + 1u; } else { hi = mid; }
  }
  starts[i] = lo;`,
);

const SUM_PARAMS = paramLayout([
  ['count', 'u32'],
  ['dv', 'u32'],
  ['vocab', 'u32'],
  ['n', 'u32'],
] as const);

function sumShader(vec: number) {
  const V = vtype(vec);
  return shaderOf(
    'embeddingBackward',
    `sum/v${vec}/wg${WG}`,
    SUM_PARAMS,
    (module) => {
      module.storage('dy', V, 'read');
      module.storage('pos', 'u32', 'read');
      module.storage('starts', 'u32', 'read');
      module.storage('dtable', V, 'read_write');
      module.declare(NAN_DECL);
    },
    `  ${elementIndex('params.count')}
  // Out-of-range ids sorted last under the key V.
  if (starts[params.vocab] < params.n) {
    dtable[i] = ${vsplat(vec, NAN)};
    return;
  }
  let v = i / params.dv;
  let col = i % params.dv;
  var acc = ${V}(0.0);
  for (var k = starts[v]; k < starts[v + 1u]; k++) { acc += dy[pos[k] * params.dv + col]; }
  dtable[i] = acc;`,
  );
}

function scratchBinding(encoder: { scratch(bytes: number): GPUBuffer }, count: number): GPUBufferBinding {
  const size = Math.max(1, count) * 4;
  return { buffer: encoder.scratch(size), offset: 0, size };
}

export const EMBEDDING_KERNELS: readonly AnyWgpuKernel[] = [
  wgpuKernel(
    embedding,
    (encoder, { inputs, outputs, io }) => {
      const out = outputs[0]!;
      if (out.size === 0) return;
      const [vocab, d] = io.inputs[0]!.shape as [number, number];
      const [table, ids] = [inputs[0]!, inputs[1]!];
      const dtype = out.dtype;
      const half = isHalf(dtype);
      // vec4 bindings must hold at least one vec4: not for an empty table.
      const vec = half ? (d % 8 === 0 && vocab > 0 ? 8 : 1) : d % 4 === 0 && vocab > 0 ? 4 : 1;
      const shader = half ? halfGatherShader(dtype, vec === 8) : gatherShader(vec);
      // Pieces of whole rows where the table or y is larger than one binding, a dispatch for each
      // pair; the ids stay bound whole unless they too exceed a binding.
      const lookups = ids.size;
      const tablePieces = rowPieces(encoder, embedding.name, vocab, { table });
      const idsWhole = ids.size * 4 <= encoder.maxBindingBytes;
      for (const rows of rowPieces(
        encoder,
        embedding.name,
        lookups,
        idsWhole ? { y: out } : { ids, y: out },
      )) {
        const elements = rows.count * d;
        // Invocations: one per vector of y, or per u32 word of two halves.
        const threads = vec > 1 ? elements / vec : half ? Math.ceil(elements / 2) : elements;
        for (const [p, piece] of tablePieces.entries()) {
          encoder.dispatch({
            shader,
            buffers: [
              rowsOf(table, vocab, piece),
              idsWhole ? ids : rowsOf(ids, lookups, rows),
              rowsOf(out, lookups, rows),
            ],
            params: {
              layout: GATHER_PARAMS,
              values: {
                count: half && vec === 1 ? elements : threads,
                dv: d / vec,
                vocab,
                idBase: idsWhole ? rows.start : 0,
                rowStart: piece.start,
                rowCount: piece.count,
                first: p === 0 ? 1 : 0,
              },
            },
            workgroups: elementGrid(encoder, threads),
          });
        }
      }
    },
    { splitsLargeOperands: true, dtypes: FLOAT },
  ),
  wgpuKernel(
    embeddingBackward,
    (encoder, { inputs, outputs, attrs }) => {
      if (outputs[0]!.size === 0) return;
      // Half dy and dtable through f32: the sums are f32 anyway.
      encodeWithF32Activations(
        encoder,
        embeddingBackward.name,
        { dy: inputs[0]! },
        { dtable: outputs[0]! },
        (i, o) => encodeBackward(encoder, i.dy, inputs[1]!, o.dtable, attrs.vocabSize),
      );
    },
    { dtypes: FLOAT },
  ),
];

function encodeBackward(
  encoder: KernelEncoder,
  dy: Operand,
  ids: Operand,
  dtable: Operand,
  vocab: number,
): void {
  const d = dtable.shape[1]!;
  const n = ids.size;
  const blocks = Math.ceil(n / BLOCK);
  const sort = (shift: number) => ({ layout: SORT_PARAMS, values: { n, blocks, shift, vocab } });
  let keys = scratchBinding(encoder, n);
  let pos = scratchBinding(encoder, n);
  if (n > 0) {
    encoder.dispatch({
      shader: keysShader,
      buffers: [ids, keys, pos],
      params: sort(0),
      workgroups: elementGrid(encoder, n),
    });
    // Keys lie in [0, V]: as many 8-bit digits as V has bits.
    const passes = Math.ceil(Math.floor(Math.log2(vocab) + 1) / 8);
    let keysOut = scratchBinding(encoder, n);
    let posOut = scratchBinding(encoder, n);
    const hist = scratchBinding(encoder, blocks * DIGITS);
    for (let p = 0; p < passes; p++) {
      const params = sort(8 * p);
      const grid = gridFor(blocks, encoder.limits);
      encoder.dispatch({ shader: histogramShader, buffers: [keys, hist], params, workgroups: grid });
      encoder.dispatch({ shader: scanShader, buffers: [hist], params, workgroups: [1] });
      encoder.dispatch({
        shader: scatterShader,
        buffers: [keys, pos, hist, keysOut, posOut],
        params,
        workgroups: grid,
      });
      [keys, keysOut] = [keysOut, keys];
      [pos, posOut] = [posOut, pos];
    }
  }
  const starts = scratchBinding(encoder, vocab + 1);
  encoder.dispatch({
    shader: startsShader,
    buffers: [keys, starts],
    params: sort(0),
    workgroups: elementGrid(encoder, vocab + 1),
  });
  // vec4 bindings must hold at least one vec4: not for an empty dy.
  const vec = d % 4 === 0 && n > 0 ? 4 : 1;
  const count = dtable.size / vec;
  encoder.dispatch({
    shader: sumShader(vec),
    buffers: [dy, pos, starts, dtable],
    params: { layout: SUM_PARAMS, values: { count, dv: d / vec, vocab, n } },
    workgroups: elementGrid(encoder, count),
  });
}
