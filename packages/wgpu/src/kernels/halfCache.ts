import type { KernelEncoder, Operand } from '../kernel.js';
import { paramLayout } from '../params.js';
import type { ShaderSource } from '../pipelines.js';
import {
  bindingType,
  halfFunctions,
  loadScalar,
  narrowFunctions,
  type Storage,
  storageOf,
} from '../wgsl/half.js';
import { ShaderModule } from '../wgsl/module.js';
import { elementGrid, elementIndex, WG } from './common.js';
import {
  declareRopeScatterBindings,
  FUSED_ROW_FIELDS,
  KV_WRITE_HEAD_FIELDS,
  ropeScatterGeometry,
  writePosition,
} from './kvWriteFields.js';
import type { RopeLayout } from './rope.js';
import { ropeRotationSource, tableKey } from './ropeRotation.js';

// The decoding family's writes into half caches (kvCacheScatter, and
// ropeKvScatter's q, keys and values in one dispatch): a cache is u32 words
// of two halves, so one invocation owns a word and rounds each of its
// written elements once.

const HALF_SCATTER_PARAMS = paramLayout([
  ['headDim', 'u32'],
  ['tokens', 'u32'],
  ['maxSeq', 'u32'],
  ['position', 'u32'],
  /** Elements from one token's row of values to the next, and where the first row starts. */
  ['width', 'u32'],
  ['start', 'u32'],
  /** Words each head's thread range spans. */
  ['words', 'u32'],
  ['heads', 'u32'],
  /** Elements of the whole cache. */
  ['total', 'u32'],
] as const);

/**
 * WGSL: the body of a scatter into a half cache (u32 words of two halves).
 * One thread per cache word of a head's written rows; a word holds elements
 * of two rows where headDim is odd, so each element is written from `values`
 * only where it lies in a written row and kept otherwise, and a word whose
 * first written element belongs to the previous head is left to that head's
 * thread. `elementValue(h, t, d)` is the f32 of row t, head h, element d;
 * `position` is in scope.
 */
function halfScatterBody(
  storage: 'f16' | 'bf16',
  cache: string,
  elementValue: (h: string, t: string, d: string) => string,
  /** The thread's index among the cache's words, and the cache's heads and elements (WGSL). */
  at: { readonly index: string; readonly heads: string; readonly total: string } = {
    index: 'i',
    heads: 'params.heads',
    total: 'params.total',
  },
): string {
  const i = at.index;
  return `let h = ${i} / params.words;
  let perHead = params.maxSeq * params.headDim;
  let start = (h * params.maxSeq + position) * params.headDim;
  let end = start + params.tokens * params.headDim;
  let word = start / 2u + ${i} % params.words;
  let lo = 2u * word;
  if (h >= ${at.heads} || lo >= end) { return; }
  var bits = ${cache}[word];
  for (var j = 0u; j < 2u; j++) {
    let e = lo + j;
    let s = e % perHead / params.headDim;
    if (e < ${at.total} && s >= position && s < position + params.tokens) {
      if (e < start) { return; }
      let he = e / perHead;
      let d = e % params.headDim;
      let half = to_${storage}(${elementValue('he', 's - position', 'd')});
      bits = (bits & ~(0xffffu << (16u * j))) | (half << (16u * j));
    }
  }
  ${cache}[word] = bits;`;
}

/**
 * WGSL: function `rotated(position, t, h, d)`, element d of key row (t, h) of
 * `from.array` (rows `from.width` apart from `from.start`) rotated at
 * position + t as `rope` rotates it (ropeKvScatter's keys).
 */
function rotatedElement(
  layout: RopeLayout,
  values: Storage,
  table: boolean,
  from: { readonly array: string; readonly start: string; readonly width: string },
): string {
  const at = (e: string) => loadScalar(values, from.array, `base + ${e}`);
  const [pair, first, second, isFirst] =
    layout === 'half'
      ? ['d % (params.headDim / 2u)', 'pair', 'pair + params.headDim / 2u', 'd < params.headDim / 2u']
      : ['d / 2u', '2u * pair', '2u * pair + 1u', 'd % 2u == 0u'];
  return `${ropeRotationSource(table)}
fn rotated(position: u32, t: u32, h: u32, d: u32) -> f32 {
  let base = ${from.start} + t * ${from.width} + h * params.headDim;
  let pair = ${pair};
  let a = ${at(first)};
  let b = ${at(second)};
  let rotation = ropeRotation(position + t, pair, 1.0);
  return select(a * rotation.y + b * rotation.x, a * rotation.x - b * rotation.y, ${isFirst});
}`;
}

/** kvCacheScatter into a half cache: rows of `values` as they are. */
function halfScatterShader(storage: 'f16' | 'bf16', values: Storage, device: boolean): ShaderSource {
  return {
    key: `decoding/kvCacheScatter/${storage}/values-${values}${device ? '/device' : ''}/wg${WG}`,
    kernel: 'kvCacheScatter',
    code: () => {
      const module = new ShaderModule();
      module.storage('cache', 'u32', 'read_write');
      module.storage('values', bindingType(values, false), 'read');
      if (device) module.storage('at', 'i32', 'read');
      module.declare(narrowFunctions(storage));
      if (values === 'bf16') module.declare(halfFunctions(values));
      const element = (h: string, t: string, d: string) =>
        loadScalar(values, 'values', `params.start + (${t}) * params.width + (${h}) * params.headDim + ${d}`);
      const position = device
        ? `let p = at[0];
  if (p < 0 || u32(p) > params.maxSeq - params.tokens) { return; }
  let position = u32(p);`
        : 'let position = params.position;';
      return module.build(
        HALF_SCATTER_PARAMS,
        WG,
        `  ${elementIndex('params.words * params.heads')}
  ${position}
  ${halfScatterBody(storage, 'cache', element)}`,
      );
    },
  };
}

const ROPE_HALF_PARAMS = paramLayout([
  ...KV_WRITE_HEAD_FIELDS,
  ['tokens', 'u32'],
  ['maxSeq', 'u32'],
  ['position', 'u32'],
  ...FUSED_ROW_FIELDS,
  /** Elements from one token's row of k (and of v) to the next. */
  ['width', 'u32'],
  /** Words each kv head's thread range spans, and the elements of a whole cache. */
  ['words', 'u32'],
  ['total', 'u32'],
] as const);

/**
 * Whether ropeKvScatter's q can be read and y written in their half storage
 * (one y word an invocation): q and y in the values' half dtype, and under
 * the 'half' layout an even number of pairs a head (the two pairs an
 * invocation rotates then fill a word at each end of the head).
 */
export function rotatesHalfQ(values: Storage, q: Storage, y: Storage, layout: RopeLayout, headDim: number) {
  return values !== 'f32' && q === values && y === values && (layout === 'interleaved' || headDim % 4 === 0);
}

/**
 * WGSL: q's part of the one-dispatch ropeKvScatter with q and y in half
 * storage, invocation i < qItems. Under 'half' it rotates pairs 2i and 2i + 1
 * (the elements p, p + 1 and p + half, p + 1 + half of a row: a y word at each
 * end); under 'interleaved' pair i (elements 2p and 2p + 1: one y word). Each
 * y element is rounded once, as the cast of an f32 y would.
 */
function halfQRotation(storage: 'f16' | 'bf16', layout: RopeLayout): string {
  const load = (e: string) => loadScalar(storage, 'q', e);
  const word = (lo: string, hi: string) => `to_${storage}(${lo}) | (to_${storage}(${hi}) << 16u)`;
  if (layout === 'interleaved') {
    return `let pair = i % params.half;
    let rest = i / params.half;
    let t = rest / params.heads;
    let r = ropeRotation(position + t, pair, 1.0);
    let base = rest * params.headDim;
    let src = base + t * params.qGap + 2u * pair;
    let a = ${load('src')};
    let b = ${load('src + 1u')};
    y[(base + 2u * pair) / 2u] = ${word('a * r.x - b * r.y', 'a * r.y + b * r.x')};`;
  }
  return `let j = 2u * i;
    let pair = j % params.half;
    let rest = j / params.half;
    let t = rest / params.heads;
    let r0 = ropeRotation(position + t, pair, 1.0);
    let r1 = ropeRotation(position + t, pair + 1u, 1.0);
    let base = rest * params.headDim;
    let src = base + t * params.qGap + pair;
    let a0 = ${load('src')};
    let a1 = ${load('src + 1u')};
    let b0 = ${load('src + params.half')};
    let b1 = ${load('src + params.half + 1u')};
    y[(base + pair) / 2u] = ${word('a0 * r0.x - b0 * r0.y', 'a1 * r1.x - b1 * r1.y')};
    y[(base + pair + params.half) / 2u] = ${word('a0 * r0.y + b0 * r0.x', 'a1 * r1.y + b1 * r1.x')};`;
}

/**
 * ropeKvScatter into half caches in one dispatch: invocations [0, qPairs)
 * rotate q's pairs into y (f32; with `halfQ`, q and y in the caches' half
 * storage and qPairs counting halfQRotation's invocations), the next
 * kvHeads · words rotate k into the key cache's words, and the last as many
 * copy v into the value cache's, each cache element rounded once.
 */
function ropeHalfScatterShader(
  storage: 'f16' | 'bf16',
  values: Storage,
  layout: RopeLayout,
  device: boolean,
  table: boolean,
  halfQ: boolean,
): ShaderSource {
  const [first, second] =
    layout === 'half' ? ['pair', 'pair + params.half'] : ['2u * pair', '2u * pair + 1u'];
  const f32Q = `// q: pair j of row (t, head), rotated at position + t.
    let pair = i % params.half;
    let rest = i / params.half;
    let t = rest / params.heads;
    let rotation = ropeRotation(position + t, pair, 1.0);
    let base = rest * params.headDim;
    let src = base + t * params.qGap;
    let a = q[src + ${first}];
    let b = q[src + ${second}];
    y[base + ${first}] = a * rotation.x - b * rotation.y;
    y[base + ${second}] = a * rotation.y + b * rotation.x;`;
  return {
    key: `decoding/ropeKvScatter/fused/${storage}/values-${values}${halfQ ? '/q-half' : ''}/${layout}${device ? '/device' : ''}${tableKey(table)}/wg${WG}`,
    kernel: 'ropeKvScatter',
    code: () => {
      const module = new ShaderModule();
      declareRopeScatterBindings(
        module,
        { kv: bindingType(values, false), cache: 'u32', ...(halfQ ? { q: 'u32' as const } : {}) },
        device,
        table,
      );
      module.declare(narrowFunctions(storage));
      // A half y is rounded in q's dtype, which may be the other half.
      if (halfQ && values !== storage) module.declare(narrowFunctions(values as 'f16' | 'bf16'));
      if (values === 'bf16') module.declare(halfFunctions(values));
      module.declare(
        rotatedElement(layout, values, table, { array: 'k', start: 'params.kStart', width: 'params.width' }),
      );
      const cacheWords = 'params.kvHeads * params.words';
      const at = (index: string) => ({ index, heads: 'params.kvHeads', total: 'params.total' });
      const value = (h: string, t: string, d: string) =>
        loadScalar(values, 'v', `params.vStart + (${t}) * params.width + (${h}) * params.headDim + ${d}`);
      return module.build(
        ROPE_HALF_PARAMS,
        WG,
        `  ${elementIndex('params.n')}
  ${writePosition(device)}
  if (i < params.qPairs) {
    ${halfQ ? halfQRotation(values as 'f16' | 'bf16', layout) : f32Q}
    return;
  }
  // A device position whose rows do not fit writes nothing to the caches.
  if (!fits) { return; }
  let w = i - params.qPairs;
  if (w < ${cacheWords}) {
    ${halfScatterBody(storage, 'kCache', (h, t, d) => `rotated(position, ${t}, ${h}, ${d})`, at('w'))}
    return;
  }
  let wv = w - ${cacheWords};
  ${halfScatterBody(storage, 'vCache', value, at('wv'))}`,
      );
    },
  };
}

/**
 * ropeKvScatter of q, k and v (k and v of one storage) into half caches, one
 * dispatch: y (f32) gets q rotated; `rows` places k and v in a fused q, k, v row.
 */
export function encodeRopeHalfScatter(
  encoder: KernelEncoder,
  t: {
    readonly q: Operand;
    readonly k: Operand;
    readonly v: Operand;
    readonly y: Operand;
    readonly kCache: Operand;
    readonly vCache: Operand;
    readonly at: Operand | undefined;
  },
  rope: {
    readonly layout: RopeLayout;
    readonly frequencies: Operand | GPUBufferBinding;
    readonly table: boolean;
  },
  where: {
    readonly position: number;
    readonly rows: {
      readonly kStart: number;
      readonly vStart: number;
      readonly qGap: number;
      readonly width: number;
    };
  },
): void {
  const geometry = ropeScatterGeometry(t.y, t.kCache);
  const { tokens, headDim, kvHeads } = geometry;
  const values = storageOf(t.k.dtype);
  const halfQ = rotatesHalfQ(values, storageOf(t.q.dtype), storageOf(t.y.dtype), rope.layout, headDim);
  // With a half q, an invocation writes a y word: two pairs under 'half', one under 'interleaved'.
  const qItems = halfQ && rope.layout === 'half' ? geometry.qPairs / 2 : geometry.qPairs;
  const words = halfScatterWords(tokens, headDim);
  const n = qItems + 2 * kvHeads * words;
  encoder.dispatch({
    shader: ropeHalfScatterShader(
      t.kCache.dtype as 'f16' | 'bf16',
      values,
      rope.layout,
      t.at !== undefined,
      rope.table,
      halfQ,
    ),
    buffers: [t.q, t.k, t.v, t.y, t.kCache, t.vCache, ...(t.at ? [t.at] : []), rope.frequencies],
    params: {
      layout: ROPE_HALF_PARAMS,
      values: {
        ...geometry,
        qPairs: qItems,
        n,
        pairs: geometry.qPairs,
        position: where.position,
        kStart: where.rows.kStart,
        vStart: where.rows.vStart,
        qGap: where.rows.qGap,
        kvGap: 0,
        width: where.rows.width,
        words,
        total: t.kCache.size,
      },
    },
    workgroups: elementGrid(encoder, n),
  });
}

/** Words a head's thread range spans: its written elements, starting at either half of a word. */
function halfScatterWords(tokens: number, headDim: number): number {
  return Math.floor((tokens * headDim + 1) / 2) + 1;
}

/** Scatters `tokens` rows of `values` [T, heads · headDim] into a half cache (kvCacheScatter). */
export function encodeHalfScatter(
  encoder: KernelEncoder,
  cache: Operand,
  values: Operand,
  at: Operand | undefined,
  position: number,
  tokens: number,
): void {
  const [heads, maxSeq, headDim] = cache.shape as [number, number, number];
  const words = halfScatterWords(tokens, headDim);
  encoder.dispatch({
    shader: halfScatterShader(cache.dtype as 'f16' | 'bf16', storageOf(values.dtype), at !== undefined),
    buffers: [cache, values, ...(at ? [at] : [])],
    params: {
      layout: HALF_SCATTER_PARAMS,
      values: {
        headDim,
        tokens,
        maxSeq,
        position,
        width: heads * headDim,
        start: 0,
        words,
        heads,
        total: cache.size,
      },
    },
    workgroups: elementGrid(encoder, words * heads),
  });
}
