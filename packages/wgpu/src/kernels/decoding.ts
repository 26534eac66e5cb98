// The decoding family: the KV-cache writes (kvCacheScatter, ropeKvScatter)
// here, incrementalAttention and causalAttention in their own files.
import { FLOAT, isHalf, kvCacheScatter, ropeKvScatter } from '@rayo/core';
import { type AnyWgpuKernel, type KernelEncoder, type Operand, wgpuKernel } from '../kernel.js';
import { paramLayout } from '../params.js';
import type { ShaderSource } from '../pipelines.js';
import { storageOf } from '../wgsl/half.js';
import { ShaderModule } from '../wgsl/module.js';
import { causalAttentionKernel } from './causalAttention.js';
import { elementGrid, elementIndex, vectorOf, WG } from './common.js';
import { encodeHalfScatter, encodeRopeHalfScatter, rotatesHalfQ } from './halfCache.js';
import { encodeWithF32Activations } from './halfEdges.js';
import { attentionKernel } from './incrementalAttention.js';
import {
  declareRopeScatterBindings,
  FUSED_ROW_FIELDS,
  KV_WRITE_HEAD_FIELDS,
  ropeScatterGeometry,
  writePosition,
} from './kvWriteFields.js';
import { checkRopePositions, type RopeLayout } from './rope.js';
import { ropeFrequencyBinding, ropeRotationSource, tableKey } from './ropeRotation.js';

// ---- kvCacheScatter ----------------------------------------------------------

const SCATTER_PARAMS = paramLayout([
  ['n', 'u32'],
  ['rowVecs', 'u32'],
  ['tokens', 'u32'],
  ['maxSeq', 'u32'],
  ['position', 'u32'],
  ['widthVecs', 'u32'],
] as const);

function scatterShader(width: 1 | 4, device: boolean): ShaderSource {
  const type = width === 4 ? 'vec4<f32>' : 'f32';
  return {
    key: `decoding/kvCacheScatter/w${width}${device ? '/device' : ''}/wg${WG}`,
    kernel: 'kvCacheScatter',
    // One thread per written vector, in cache order: the rows of one head are
    // consecutive in the cache, so the writes are contiguous.
    code: () => {
      const module = new ShaderModule().params(SCATTER_PARAMS);
      module.storage('cache', type, 'read_write');
      module.storage('values', type, 'read');
      if (device) module.storage('at', 'i32', 'read');
      return module.build(
        undefined,
        WG,
        `  ${elementIndex('params.n')}
${
  device
    ? `  // A device position whose rows do not fit writes nothing (tokens <= maxSeq was checked on the host).
  let p = at[0];
  if (p < 0 || u32(p) > params.maxSeq - params.tokens) { return; }
  let position = u32(p);`
    : '  let position = params.position;'
}
  let d = i % params.rowVecs;
  let row = i / params.rowVecs;
  let t = row % params.tokens;
  let h = row / params.tokens;
  cache[(h * params.maxSeq + position + t) * params.rowVecs + d] = values[t * params.widthVecs + h * params.rowVecs + d];`,
      );
    },
  };
}

const scatterKernel = wgpuKernel(
  kvCacheScatter,
  (encoder, { inputs, outputs, attrs }) => {
    const cache = outputs[0]!;
    const values = inputs[1]!;
    const at = inputs[2];
    const [nHeads, maxSeq, headDim] = cache.shape as [number, number, number];
    const width = nHeads * headDim;
    if (values.size === 0 || width === 0) return;
    const tokens = values.size / width;
    if (isHalf(cache.dtype)) {
      encodeHalfScatter(encoder, cache, values, at, attrs.position, tokens);
      return;
    }
    const { width: w } = vectorOf(headDim);
    const n = values.size / w;
    // An f32 cache takes half rows widened first.
    encodeWithF32Activations(encoder, kvCacheScatter.name, { values }, {}, ({ values: rows }) => {
      encoder.dispatch({
        shader: scatterShader(w, at !== undefined),
        buffers: at ? [cache, rows!, at] : [cache, rows!],
        params: {
          layout: SCATTER_PARAMS,
          values: { n, rowVecs: headDim / w, tokens, maxSeq, position: attrs.position, widthVecs: width / w },
        },
        workgroups: elementGrid(encoder, n),
      });
    });
  },
  { dtypes: FLOAT },
);

// ---- ropeKvScatter -------------------------------------------------------------

const ROPE_SCATTER_PARAMS = paramLayout([
  ...KV_WRITE_HEAD_FIELDS,
  ['tokens', 'u32'],
  ['maxSeq', 'u32'],
  ['position', 'u32'],
  ...FUSED_ROW_FIELDS,
] as const);

function ropeScatterShader(layout: RopeLayout, device: boolean, table: boolean): ShaderSource {
  const [first, second] =
    layout === 'half' ? ['pair', 'pair + params.half'] : ['2u * pair', '2u * pair + 1u'];
  /** The rotated pair of `from` at row offset `src`, written to `to` at row offset `dst`. */
  const rotate = (from: string, to: string, dst: string) => `
    let a = ${from}[src + first];
    let b = ${from}[src + second];
    ${to}[${dst} + first] = a * c - b * s;
    ${to}[${dst} + second] = a * s + b * c;`;
  return {
    key: `decoding/ropeKvScatter/${layout}${device ? '/device' : ''}${tableKey(table)}/wg${WG}`,
    kernel: 'ropeKvScatter',
    // One invocation per item, in order: the rotated pairs of q, those of k
    // (written to their kCache rows), then the elements of v (copied to their
    // vCache rows).
    code: () => {
      const module = new ShaderModule().params(ROPE_SCATTER_PARAMS);
      declareRopeScatterBindings(module, { kv: 'f32', cache: 'f32' }, device, table);
      module.declare(ropeRotationSource(table));
      return module.build(
        undefined,
        WG,
        `  ${elementIndex('params.n')}
  ${writePosition(device)}
  if (i >= params.pairs) {
    if (!fits) { return; }
    let j = i - params.pairs;
    let rest = j / params.headDim; // t · kvHeads + h
    let t = rest / params.kvHeads;
    let h = rest % params.kvHeads;
    vCache[(h * params.maxSeq + position + t) * params.headDim + j % params.headDim] = v[params.vStart + j + t * params.kvGap];
    return;
  }
  let isK = i >= params.qPairs;
  if (isK && !fits) { return; }
  let j = select(i, i - params.qPairs, isK);
  let rowHeads = select(params.heads, params.kvHeads, isK);
  let pair = j % params.half;
  let rest = j / params.half; // t · rowHeads + h
  let t = rest / rowHeads;
  let rotation = ropeRotation(position + t, pair, 1.0);
  let c = rotation.x;
  let s = rotation.y;
  let first = ${first};
  let second = ${second};
  let base = rest * params.headDim;
  let src = select(0u, params.kStart, isK) + base + t * select(params.qGap, params.kvGap, isK);
  if (isK) {${rotate('k', 'kCache', '(rest % rowHeads * params.maxSeq + position + t) * params.headDim')}
  } else {${rotate('q', 'y', 'base')}
  }`,
      );
    },
  };
}

/**
 * f32 caches: the shader above. Half caches: halfCache.ts's one dispatch
 * rotates q into y, rotates the keys and copies the values into the caches,
 * each element rounded once. A half q and y go through f32. A fused q, k, v
 * input is bound as q, k and v at once, each read from its heads on.
 */
const ropeScatterKernel = wgpuKernel(
  ropeKvScatter,
  (encoder, { inputs, outputs, attrs }) => encodeRopeKvScatter(encoder, inputs, outputs, attrs),
  { dtypes: FLOAT },
);

/** ropeKvScatter's dispatches for its inputs and outputs in spec order (also ropeAttention's first pass). */
export function encodeRopeKvScatter(
  encoder: KernelEncoder,
  inputs: readonly (Operand | undefined)[],
  outputs: readonly Operand[],
  attrs: { readonly position: number; readonly theta: number; readonly layout: RopeLayout },
): void {
  const [q, kIn, vIn, , , at, frequencies] = inputs;
  const [y, kCache, vCache] = outputs;
  const [tokens, heads, headDim] = y!.shape as [number, number, number];
  const [kvHeads, maxSeq] = kCache!.shape as [number, number, number];
  if (tokens * (heads + 2 * kvHeads) * headDim === 0) return;
  const fused = kIn === undefined;
  const rows = fused ? fusedRows(heads, kvHeads, headDim) : undefined;
  checkRopePositions('ropeKvScatter', 'attrs.position', (at ? maxSeq : attrs.position + tokens) - 1);
  const position = attrs.position ?? 0;
  const rope = {
    layout: attrs.layout,
    frequencies: ropeFrequencyBinding(encoder, attrs.theta, headDim, frequencies),
    table: frequencies !== undefined,
  };
  const caches = { kCache: kCache!, vCache: vCache!, at };
  if (!isHalf(kCache!.dtype)) {
    encodeWithF32Activations(encoder, ropeKvScatter.name, { q, k: kIn, v: vIn }, { y }, (i, o) =>
      encodeRopeScatter(encoder, { q: i.q, k: i.k ?? i.q, v: i.v ?? i.q, y: o.y, ...caches }, rope, {
        position,
        rows,
      }),
    );
    return;
  }
  // k and v share q's dtype (the spec's group), so one shader reads both.
  const row = (heads + 2 * kvHeads) * headDim;
  const where = rows
    ? { kStart: rows.kStart, vStart: rows.vStart, qGap: rows.qGap, width: row }
    : { kStart: 0, vStart: 0, qGap: 0, width: kvHeads * headDim };
  const halves = { k: kIn ?? q!, v: vIn ?? q!, kCache: kCache!, vCache: vCache!, at };
  // A half q and y in the values' dtype are read and written in place: no cast dispatches around it.
  const values = storageOf(halves.k.dtype);
  if (rotatesHalfQ(values, storageOf(q!.dtype), storageOf(y!.dtype), attrs.layout, headDim)) {
    encodeRopeHalfScatter(encoder, { q: q!, y: y!, ...halves }, rope, { position, rows: where });
    return;
  }
  encodeWithF32Activations(encoder, ropeKvScatter.name, { q }, { y }, (i, o) =>
    encodeRopeHalfScatter(encoder, { q: i.q!, y: o.y!, ...halves }, rope, { position, rows: where }),
  );
}

/** Where k and v lie in a fused q, k, v row: their first elements and the gaps past their heads. */
export function fusedRows(heads: number, kvHeads: number, headDim: number) {
  const row = (heads + 2 * kvHeads) * headDim;
  return {
    kStart: heads * headDim,
    vStart: (heads + kvHeads) * headDim,
    qGap: row - heads * headDim,
    kvGap: row - kvHeads * headDim,
  };
}

/** How ropeKvScatter rotates: its layout and what its shaders bind as `frequencies`. */
interface RopeScatterRotation {
  readonly layout: RopeLayout;
  readonly frequencies: Operand | GPUBufferBinding;
  readonly table: boolean;
}

/** The f32 shader over q, k and v into f32 caches. */
function encodeRopeScatter(
  encoder: KernelEncoder,
  t: Readonly<Record<'q' | 'k' | 'v' | 'y' | 'kCache' | 'vCache' | 'at', Operand | undefined>>,
  rope: RopeScatterRotation,
  where: { position: number; rows: ReturnType<typeof fusedRows> | undefined },
): void {
  const { q, k, v, y, kCache, vCache, at } = t;
  const { position, rows } = where;
  const geometry = ropeScatterGeometry(y!, kCache!);
  const { tokens, headDim, kvHeads, half, qPairs } = geometry;
  const pairs = qPairs + tokens * kvHeads * half;
  const n = pairs + tokens * kvHeads * headDim;
  if (n === 0) return;
  encoder.dispatch({
    shader: ropeScatterShader(rope.layout, at !== undefined, rope.table),
    buffers: [q!, k!, v!, y!, kCache!, vCache!, ...(at ? [at] : []), rope.frequencies],
    params: {
      layout: ROPE_SCATTER_PARAMS,
      values: {
        ...geometry,
        n,
        pairs,
        position,
        kStart: rows?.kStart ?? 0,
        vStart: rows?.vStart ?? 0,
        qGap: rows?.qGap ?? 0,
        kvGap: rows?.kvGap ?? 0,
      },
    },
    workgroups: elementGrid(encoder, n),
  });
}

export const DECODING_KERNELS: readonly AnyWgpuKernel[] = [
  scatterKernel,
  attentionKernel,
  ropeScatterKernel,
  causalAttentionKernel,
];
