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
import type { RopeLayout } from './rope.js';
import { declareRopeFrequencies, ropeRotationSource, tableKey } from './ropeRotation.js';

// The decoding family's writes into half caches (kvCacheScatter, and
// ropeKvScatter's keys and values): a cache is u32 words of two halves, so
// one invocation owns a word and rounds each of its written elements once.

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
): string {
  return `let h = i / params.words;
  let perHead = params.maxSeq * params.headDim;
  let start = (h * params.maxSeq + position) * params.headDim;
  let end = start + params.tokens * params.headDim;
  let word = start / 2u + i % params.words;
  let lo = 2u * word;
  if (h >= params.heads || lo >= end) { return; }
  var bits = ${cache}[word];
  for (var j = 0u; j < 2u; j++) {
    let e = lo + j;
    let s = e % perHead / params.headDim;
    if (e < params.total && s >= position && s < position + params.tokens) {
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
 * `values` rotated at position + t as `rope` rotates it (ropeKvScatter's keys).
 */
function rotatedElement(layout: RopeLayout, values: Storage, table: boolean): string {
  const at = (e: string) => loadScalar(values, 'values', `base + ${e}`);
  const [pair, first, second, isFirst] =
    layout === 'half'
      ? ['d % (params.headDim / 2u)', 'pair', 'pair + params.headDim / 2u', 'd < params.headDim / 2u']
      : ['d / 2u', '2u * pair', '2u * pair + 1u', 'd % 2u == 0u'];
  return `${ropeRotationSource(table)}
fn rotated(position: u32, t: u32, h: u32, d: u32) -> f32 {
  let base = params.start + t * params.width + h * params.headDim;
  let pair = ${pair};
  let a = ${at(first)};
  let b = ${at(second)};
  let rotation = ropeRotation(position + t, pair, 1.0);
  return select(a * rotation.y + b * rotation.x, a * rotation.x - b * rotation.y, ${isFirst});
}`;
}

/** A scatter into a half cache: rows of `values` as they are, or rotated (ropeKvScatter's keys). */
function halfScatterShader(
  storage: 'f16' | 'bf16',
  values: Storage,
  device: boolean,
  rope?: RopeLayout,
  table = false,
): ShaderSource {
  const kernel = rope ? 'ropeKvScatter' : 'kvCacheScatter';
  return {
    key: `decoding/${kernel}/${storage}/values-${values}${rope ? `/${rope}` : ''}${device ? '/device' : ''}${tableKey(table)}/wg${WG}`,
    kernel,
    code: () => {
      const module = new ShaderModule();
      module.storage('cache', 'u32', 'read_write');
      module.storage('values', bindingType(values, false), 'read');
      if (device) module.storage('at', 'i32', 'read');
      if (rope) declareRopeFrequencies(module, table);
      module.declare(narrowFunctions(storage));
      if (values === 'bf16') module.declare(halfFunctions(values));
      if (rope) module.declare(rotatedElement(rope, values, table));
      const element = (h: string, t: string, d: string) =>
        rope
          ? `rotated(position, ${t}, ${h}, ${d})`
          : loadScalar(
              values,
              'values',
              `params.start + (${t}) * params.width + (${h}) * params.headDim + ${d}`,
            );
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

/** Words a head's thread range spans: its written elements, starting at either half of a word. */
function halfScatterWords(tokens: number, headDim: number): number {
  return Math.floor((tokens * headDim + 1) / 2) + 1;
}

/** Scatters `tokens` rows of `values` (rotated with `rope`, by its `frequencies` binding) into a half cache. */
export function encodeHalfScatter(
  encoder: KernelEncoder,
  cache: Operand,
  values: Operand,
  at: Operand | undefined,
  position: number,
  tokens: number,
  rope?: {
    readonly layout: RopeLayout;
    /** The call's frequency table, or theta's turns (`ropeFrequencyBinding`). */
    readonly frequencies: Operand | GPUBufferBinding;
    readonly table: boolean;
  },
  rows: { readonly start: number; readonly stride: number } = {
    start: 0,
    stride: cache.shape[0]! * cache.shape[2]!,
  },
): void {
  const [heads, maxSeq, headDim] = cache.shape as [number, number, number];
  const words = halfScatterWords(tokens, headDim);
  encoder.dispatch({
    shader: halfScatterShader(
      cache.dtype as 'f16' | 'bf16',
      storageOf(values.dtype),
      at !== undefined,
      rope?.layout,
      rope?.table,
    ),
    buffers: [cache, values, ...(at ? [at] : []), ...(rope ? [rope.frequencies] : [])],
    params: {
      layout: HALF_SCATTER_PARAMS,
      values: {
        headDim,
        tokens,
        maxSeq,
        position,
        width: rows.stride,
        start: rows.start,
        words,
        heads,
        total: cache.size,
      },
    },
    workgroups: elementGrid(encoder, words * heads),
  });
}
