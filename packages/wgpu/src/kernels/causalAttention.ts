import { causalAttention, FLOAT, UnsupportedOnBackendError } from '@rayo/core';
import { gridFor, type KernelEncoder, linearWorkgroup, type Operand, wgpuKernel } from '../kernel.js';
import { paramLayout } from '../params.js';
import type { ShaderSource } from '../pipelines.js';
import { bindingType, halfFunctions, loadScalar, type Storage, storageOf } from '../wgsl/half.js';
import { ShaderModule } from '../wgsl/module.js';
import { ROWWISE_ROWS, rowwiseKeys, rowwiseShader } from './causalAttentionRows.js';
import { WG } from './common.js';
import { flashPrefillRows, flashPrefillShader, planFlashPrefill } from './flashPrefillMatrix.js';
import { encodeWithF32Activations } from './halfEdges.js';
import { halfGemmMode } from './matmul.js';

// Prefill attention, tiled the FlashAttention way. A workgroup takes ROWS
// query rows of one kv head, a row being (token, one of the kv head's
// grouped query heads), so the grouped heads share every K and V tile it
// loads. Each row belongs to LANES threads, each holding a slice of the
// row's q and of its output accumulator in registers. Per tile of keys:
// K and V rows go into workgroup memory (halves widened to f32 as loaded),
// every thread's partial dot products of its slice are summed by the row's
// lanes (each lane sums them all, so every lane holds the row's scores),
// and the online softmax rescales the running sum and accumulator. The
// workgroup visits keys up to its last row's causal bound only: tiles past
// it are skipped, keys past a row's own bound get weight 0. Arithmetic is
// f32 throughout.

/** Workgroup memory every adapter offers (WebGPU's default limit, SwiftShader's too). */
const WORKGROUP_BYTES = 16_384;
/** Most keys per tile: more holds more scores per invocation for little gain. */
const MAX_TILE_KEYS = 16;
const NEG_BIG = '-3.0e38';

const PARAMS = paramLayout([
  ['tokens', 'u32'],
  ['heads', 'u32'],
  ['group', 'u32'],
  ['maxSeq', 'u32'],
  ['position', 'u32'],
  /** Workgroups per kv head. */
  ['rowTiles', 'u32'],
  /** Workgroups in all. */
  ['tiles', 'u32'],
  ['scale', 'f32'],
] as const);

/** How one headDim is tiled. */
interface Tiling {
  readonly headDim: number;
  /** Threads per query row. */
  readonly lanes: number;
  /** Elements of a row each lane holds: ceil(headDim / lanes). */
  readonly slice: number;
  /** Row stride in workgroup memory: slice · lanes (zero padded past headDim). */
  readonly stride: number;
  /** Query rows per workgroup. */
  readonly rows: number;
  /** Keys per K/V tile. */
  readonly keys: number;
}

/** The tiling of `headDim`, or undefined where one tile of a key does not fit in workgroup memory. */
export function causalTiling(headDim: number): Tiling | undefined {
  const lanes = headDim >= 256 ? 16 : headDim >= 32 ? 8 : headDim >= 8 ? 4 : 1;
  const slice = Math.ceil(headDim / lanes);
  const stride = slice * lanes;
  // K and V tiles (keys × stride each) and the partial dots (WG × keys), in f32.
  const keys = Math.min(MAX_TILE_KEYS, Math.floor(WORKGROUP_BYTES / 4 / (2 * stride + WG)));
  if (keys < 1) return undefined;
  return { headDim, lanes, slice, stride, rows: WG / lanes, keys };
}

function causalShader(tiling: Tiling, cache: Storage): ShaderSource {
  const { headDim: D, lanes: L, slice: S, stride: P, rows: R, keys: B } = tiling;
  const key = `decoding/causalAttention/d${D}/l${L}/k${B}${cache === 'f32' ? '' : `/cache-${cache}`}/wg${WG}`;
  // Loops of constant counts over private arrays: compilers unroll them into
  // registers, and the text stays small for every headDim (a software
  // adapter compiles large unrolled text slowly).
  const code = () => {
    const module = new ShaderModule().params(PARAMS);
    module.storage('q', 'f32', 'read');
    module.storage('k', bindingType(cache, false), 'read');
    module.storage('v', bindingType(cache, false), 'read');
    module.storage('out', 'f32', 'read_write');
    module.workgroupArray('ks', 'f32', B * P);
    module.workgroupArray('vs', 'f32', B * P);
    module.workgroupArray('red', 'f32', WG * B);
    module.declare(halfFunctions(cache));
    return module.build(
      undefined,
      WG,
      `  let tid = lid.x;
  let w = ${linearWorkgroup};
  // A grid spread over y may have a few workgroups too many.
  if (w >= params.tiles) { return; }
  let g = w / params.rowTiles;
  let row0 = (w % params.rowTiles) * ${R}u;
  let rows = params.tokens * params.group;
  let r = tid / ${L}u;
  let l = tid % ${L}u;
  // Rows past the end (the last workgroup's) compute the last row again and store nothing.
  let row = min(row0 + r, rows - 1u);
  let t = row / params.group;
  let h = g * params.group + row % params.group;
  let bound = params.position + t;
  // Keys the workgroup visits: up to its last row's bound (uniform: no row of it sees further).
  let keys = params.position + min(row0 + ${R - 1}u, rows - 1u) / params.group + 1u;
  let qBase = (t * params.heads + h) * ${D}u;
  let kvBase = g * params.maxSeq * ${D}u;
  // This lane's slice of the row: elements l, l + ${L}, …; past headDim it holds 0 and stores nothing.
  var qs: array<f32, ${S}>;
  var o: array<f32, ${S}>;
  var p: array<f32, ${B}>;
  for (var i = 0u; i < ${S}u; i++) {
    let d = l + i * ${L}u;
    qs[i] = select(0.0, q[qBase + min(d, ${D - 1}u)], d < ${D}u);
    o[i] = 0.0;
  }
  var m = ${NEG_BIG};
  var sum = 0.0;
  for (var k0 = 0u; k0 < keys; k0 += ${B}u) {
    // The previous tile's readers are done before it is overwritten.
    workgroupBarrier();
    for (var e = tid; e < ${B * P}u; e += ${WG}u) {
      let j = k0 + e / ${P}u;
      let d = e % ${P}u;
      let at = kvBase + min(j, params.maxSeq - 1u) * ${D}u + min(d, ${D - 1}u);
      let ok = j < keys && d < ${D}u;
      ks[e] = select(0.0, ${loadScalar(cache, 'k', 'at')}, ok);
      vs[e] = select(0.0, ${loadScalar(cache, 'v', 'at')}, ok);
    }
    workgroupBarrier();
    for (var j = 0u; j < ${B}u; j++) {
      var acc = 0.0;
      for (var i = 0u; i < ${S}u; i++) { acc += qs[i] * ks[j * ${P}u + l + i * ${L}u]; }
      red[(r * ${B}u + j) * ${L}u + l] = acc;
    }
    workgroupBarrier();
    // Every lane of the row sums the row's partial dots: each then holds its scores.
    var mt = m;
    for (var j = 0u; j < ${B}u; j++) {
      var acc = 0.0;
      for (var x = 0u; x < ${L}u; x++) { acc += red[(r * ${B}u + j) * ${L}u + x]; }
      p[j] = select(${NEG_BIG}, params.scale * acc, k0 + j <= bound);
      mt = max(mt, p[j]);
    }
    let alpha = exp(m - mt);
    sum *= alpha;
    for (var i = 0u; i < ${S}u; i++) { o[i] *= alpha; }
    for (var j = 0u; j < ${B}u; j++) {
      let pj = select(0.0, exp(p[j] - mt), k0 + j <= bound);
      sum += pj;
      for (var i = 0u; i < ${S}u; i++) { o[i] += pj * vs[j * ${P}u + l + i * ${L}u]; }
    }
    m = mt;
  }
  if (row0 + r < rows) {
    for (var i = 0u; i < ${S}u; i++) {
      let d = l + i * ${L}u;
      if (d < ${D}u) { out[qBase + d] = o[i] / sum; }
    }
  }`,
    );
  };
  return { key, kernel: 'causalAttention', code };
}

/** Half caches are read as stored; a half q and out go through f32. */
export const causalAttentionKernel = wgpuKernel(
  causalAttention,
  (encoder, { inputs, outputs, attrs }) => {
    encodeWithF32Activations(encoder, causalAttention.name, { q: inputs[0]! }, { out: outputs[0]! }, (i, o) =>
      encodeCausalAttention(encoder, i.q, inputs[1]!, inputs[2]!, o.out, attrs),
    );
  },
  { dtypes: FLOAT },
);

function encodeCausalAttention(
  encoder: KernelEncoder,
  q: Operand,
  k: Operand,
  v: Operand,
  out: Operand,
  attrs: { readonly position: number; readonly scale: number },
): void {
  const [tokens, heads, headDim] = out.shape as [number, number, number];
  const [kvHeads, maxSeq] = k.shape as [number, number, number];
  if (out.size === 0) return;
  const tiling = causalTiling(headDim);
  if (!tiling) {
    throw new UnsupportedOnBackendError(
      `causalAttention: a key row of headDim ${headDim} does not fit in ${WORKGROUP_BYTES} bytes of workgroup memory`,
      {
        operation: 'causalAttention',
        argument: 'q',
        expected: 'a headDim whose K and V rows fit in workgroup memory',
        actual: `headDim ${headDim}`,
      },
    );
  }
  const group = heads / kvHeads;
  const cache = storageOf(k.dtype);
  // Over f16 caches, subgroup matrices where the f16 products take them (unless f16Attention
  // is 'f32'); else head dims up to 64 take the row-per-thread kernel, the rest the lane-split one.
  const flash =
    cache === 'f16' && encoder.tuning.f16Attention !== 'f32'
      ? planFlashPrefill(headDim, halfGemmMode(encoder), flashDevice(encoder))
      : undefined;
  const rowwise = rowwiseKeys(headDim) !== undefined;
  const rows = flash ? flashPrefillRows(flash.tile) : rowwise ? ROWWISE_ROWS : tiling.rows;
  const rowTiles = Math.ceil((tokens * group) / rows);
  const tiles = rowTiles * kvHeads;
  const scale = attrs.scale === 0 ? 1 / Math.sqrt(headDim) : attrs.scale;
  encoder.dispatch({
    shader: flash
      ? flashPrefillShader(flash, PARAMS)
      : rowwise
        ? rowwiseShader(headDim, cache, PARAMS)
        : causalShader(tiling, cache),
    buffers: [q, k, v, out],
    params: {
      layout: PARAMS,
      values: { tokens, heads, group, maxSeq, position: attrs.position, rowTiles, tiles, scale },
    },
    workgroups: gridFor(tiles, encoder.limits),
  });
}

function flashDevice(encoder: KernelEncoder) {
  return {
    maxWorkgroupBytes: encoder.limits.maxComputeWorkgroupStorageSize,
    maxInvocations: encoder.limits.maxComputeInvocationsPerWorkgroup,
    shaderF16: encoder.features.has('shader-f16'),
    ...(encoder.tuning.f16AttentionTile ? { tile: encoder.tuning.f16AttentionTile } : {}),
    ...(encoder.subgroupMatrix ? { subgroupMatrix: encoder.subgroupMatrix } : {}),
  };
}
