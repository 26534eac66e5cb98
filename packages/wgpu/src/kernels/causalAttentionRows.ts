import type { ParamLayout } from '../params.js';
import type { ShaderSource } from '../pipelines.js';
import { halfFunctions, type Storage, unpack2 } from '../wgsl/half.js';
import { linearWorkgroup, ShaderModule } from '../wgsl/module.js';

// Prefill attention with one thread per query row, for head dims up to 64
// (a multiple of 4): the row's q and output accumulator live in the
// thread's registers as vec4s, so a score needs no reduction across lanes,
// and every thread of the workgroup reads the same K or V vector from
// workgroup memory (a broadcast) for four multiply-adds. A workgroup
// takes ROWS rows of one kv head (its grouped heads share every tile), K
// and V tiles of up to 32 keys are loaded as vec4s (halves widened to f32),
// and the online softmax runs key by key (the accumulator rescaled only
// when a row's maximum grows), so no per-tile array of scores is held.
// Same skipping and masking as the lane-split kernel (`causalAttention.ts`),
// which takes the other head dims.

/** Threads per workgroup, one query row each. */
export const ROWWISE_ROWS = 64;
const WORKGROUP_BYTES = 16_384;
const MAX_TILE_KEYS = 32;
const NEG_BIG = '-3.0e38';

/** Keys per K/V tile for `headDim`, or undefined where the row-per-thread kernel does not take it. */
export function rowwiseKeys(headDim: number): number | undefined {
  if (headDim % 4 !== 0 || headDim > 64 || headDim === 0) return undefined;
  return Math.min(MAX_TILE_KEYS, Math.floor(WORKGROUP_BYTES / (2 * headDim * 4)));
}

/** WGSL: the four elements from element `at` (a multiple of 4) of binding `array` as vec4<f32>. */
function load4(cache: Storage, array: string, at: string): string {
  if (cache === 'f32') return `${array}[(${at}) >> 2u]`;
  const words = `${array}[(${at}) >> 2u]`;
  return `vec4<f32>(${unpack2(cache, `${words}.x`)}, ${unpack2(cache, `${words}.y`)})`;
}

export function rowwiseShader(headDim: number, cache: Storage, params: ParamLayout<string>): ShaderSource {
  const D = headDim;
  const V = D / 4;
  const B = rowwiseKeys(D)!;
  const R = ROWWISE_ROWS;
  const key = `decoding/causalAttention/rows/d${D}/k${B}${cache === 'f32' ? '' : `/cache-${cache}`}/wg${R}`;
  const code = () => {
    const module = new ShaderModule().params(params);
    module.storage('q', 'f32', 'read');
    module.storage('k', cache === 'f32' ? 'vec4<f32>' : 'vec2<u32>', 'read');
    module.storage('v', cache === 'f32' ? 'vec4<f32>' : 'vec2<u32>', 'read');
    module.storage('out', 'f32', 'read_write');
    module.workgroupArray('ks', 'vec4<f32>', B * V);
    module.workgroupArray('vs', 'vec4<f32>', B * V);
    module.declare(halfFunctions(cache));
    return module.build(
      undefined,
      R,
      `  let tid = lid.x;
  let w = ${linearWorkgroup};
  if (w >= params.tiles) { return; }
  let g = w / params.rowTiles;
  let row0 = (w % params.rowTiles) * ${R}u;
  let rows = params.tokens * params.group;
  // Rows past the end (the last workgroup's) compute the last row again and store nothing.
  let row = min(row0 + tid, rows - 1u);
  let t = row / params.group;
  let h = g * params.group + row % params.group;
  let bound = params.position + t;
  // Keys the workgroup visits: up to its last row's bound (uniform: no row of it sees further).
  let keys = params.position + min(row0 + ${R - 1}u, rows - 1u) / params.group + 1u;
  let qBase = (t * params.heads + h) * ${D}u;
  let kvBase = g * params.maxSeq * ${D}u;
  var qv: array<vec4<f32>, ${V}>;
  var o: array<vec4<f32>, ${V}>;
  for (var i = 0u; i < ${V}u; i++) {
    let at = qBase + 4u * i;
    qv[i] = vec4<f32>(q[at], q[at + 1u], q[at + 2u], q[at + 3u]);
    o[i] = vec4<f32>(0.0);
  }
  var m = ${NEG_BIG};
  var sum = 0.0;
  for (var k0 = 0u; k0 < keys; k0 += ${B}u) {
    // The previous tile's readers are done before it is overwritten.
    workgroupBarrier();
    for (var e = tid; e < ${B * V}u; e += ${R}u) {
      let j = k0 + e / ${V}u;
      let at = kvBase + min(j, params.maxSeq - 1u) * ${D}u + (e % ${V}u) * 4u;
      let ok = j < keys;
      ks[e] = select(vec4<f32>(0.0), ${load4(cache, 'k', 'at')}, ok);
      vs[e] = select(vec4<f32>(0.0), ${load4(cache, 'v', 'at')}, ok);
    }
    workgroupBarrier();
    for (var j = 0u; j < ${B}u; j++) {
      var acc = vec4<f32>(0.0);
      for (var i = 0u; i < ${V}u; i++) { acc += qv[i] * ks[j * ${V}u + i]; }
      let s = params.scale * (acc.x + acc.y + acc.z + acc.w);
      if (k0 + j <= bound) {
        // Online softmax key by key: the accumulator is rescaled only when the maximum grows.
        if (s > m) {
          let alpha = exp(m - s);
          sum *= alpha;
          for (var i = 0u; i < ${V}u; i++) { o[i] *= alpha; }
          m = s;
        }
        let pj = exp(s - m);
        sum += pj;
        for (var i = 0u; i < ${V}u; i++) { o[i] += pj * vs[j * ${V}u + i]; }
      }
    }
  }
  if (row0 + tid < rows) {
    for (var i = 0u; i < ${V}u; i++) {
      let at = qBase + 4u * i;
      let r = o[i] / sum;
      out[at] = r.x;
      out[at + 1u] = r.y;
      out[at + 2u] = r.z;
      out[at + 3u] = r.w;
    }
  }`,
    );
  };
  return { key, kernel: 'causalAttention', code };
}
