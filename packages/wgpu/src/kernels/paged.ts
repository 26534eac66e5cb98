// The paged KV cache's writes (pagedKvWrite, ropePagedKvWrite); pagedAttention
// is incrementalAttention's split pass over the pools (incrementalAttention.ts).
import { FLOAT, pagedKvWrite, ropePagedKvWrite } from '@rayo/core';
import { type AnyWgpuKernel, type KernelEncoder, type Operand, wgpuKernel } from '../kernel.js';
import { paramLayout } from '../params.js';
import type { ShaderSource } from '../pipelines.js';
import { narrowFunctions, type Storage, storageOf } from '../wgsl/half.js';
import { ShaderModule } from '../wgsl/module.js';
import { elementGrid, elementIndex, WG } from './common.js';
import { fusedRows } from './decoding.js';
import { encodeWithF32Activations } from './halfEdges.js';
import { pagedAttentionKernel } from './incrementalAttention.js';
import { FUSED_ROW_FIELDS, KV_WRITE_HEAD_FIELDS } from './kvWriteFields.js';
import type { RopeLayout } from './rope.js';
import {
  declareRopeFrequencies,
  ropeFrequencyBinding,
  ropeRotationSource,
  tableKey,
} from './ropeRotation.js';

const WRITE_FIELDS = [...KV_WRITE_HEAD_FIELDS, ['pageSize', 'u32'], ['capacity', 'u32']] as const;
const WRITE_PARAMS = paramLayout(WRITE_FIELDS);
const ROPE_WRITE_PARAMS = paramLayout([...WRITE_FIELDS, ...FUSED_ROW_FIELDS] as const);

/**
 * WGSL: element `e` of pool `pool` set to `x`. Half pools are u32 words of
 * two halves that rows of different slots may share (odd headDim, or a
 * page's last row and the next one's first): each invocation clears and sets
 * its own half with atomics, so concurrent writes to a word never race.
 */
function storeElement(cache: Storage, pool: string, e: string, x: string): string {
  if (cache === 'f32') return `${pool}[${e}] = ${x};`;
  return `{
      let word = (${e}) >> 1u;
      let shift = ((${e}) & 1u) * 16u;
      atomicAnd(&${pool}[word], ~(0xffffu << shift));
      atomicOr(&${pool}[word], to_${cache}(${x}) << shift);
    }`;
}

/**
 * One invocation per item, in order: with rope, the rotated pairs of q
 * (written to y), then those of k (written to kPages); then the elements of
 * the rows copied as they are, k's and v's together without rope, v's with.
 * A row whose slot lies outside the pool writes nothing to the pools; rows
 * are f32 (half rows are widened first).
 */
function writeShader(cache: Storage, rope: { layout: RopeLayout; table: boolean } | undefined): ShaderSource {
  const store = (pool: string, x: string) => storeElement(cache, pool, 'dst', x);
  const poolType = cache === 'f32' ? 'f32' : 'atomic<u32>';
  return {
    key: `paged/kvWrite${rope ? `/rope-${rope.layout}${tableKey(rope.table)}` : ''}${cache === 'f32' ? '' : `/cache-${cache}`}/wg${WG}`,
    kernel: rope ? 'ropePagedKvWrite' : 'pagedKvWrite',
    code: () => {
      const module = new ShaderModule().params(rope ? ROPE_WRITE_PARAMS : WRITE_PARAMS);
      if (rope) module.storage('q', 'f32', 'read');
      module.storage('k', 'f32', 'read');
      module.storage('v', 'f32', 'read');
      if (rope) module.storage('y', 'f32', 'read_write');
      module.storage('kPages', poolType, 'read_write');
      module.storage('vPages', poolType, 'read_write');
      module.storage('slots', 'i32', 'read');
      if (rope) {
        module.storage('positions', 'i32', 'read');
        declareRopeFrequencies(module, rope.table);
        module.declare(ropeRotationSource(rope.table));
      }
      if (cache !== 'f32') module.declare(narrowFunctions(cache));
      // The pool element of element d of row r's kv head h, or none (slot outside the pool).
      module.declare(`fn poolElement(r: u32, h: u32, d: u32) -> i32 {
  let slot = slots[r];
  if (slot < 0 || u32(slot) >= params.capacity) { return -1; }
  let page = u32(slot) / params.pageSize;
  let row = (page * params.kvHeads + h) * params.pageSize + u32(slot) % params.pageSize;
  return i32(row * params.headDim + d);
}`);
      const [first, second] =
        rope?.layout === 'interleaved' ? ['2u * pair', '2u * pair + 1u'] : ['pair', 'pair + params.half'];
      const rotation = rope
        ? `  if (i < params.pairs) {
    let isK = i >= params.qPairs;
    let j = select(i, i - params.qPairs, isK);
    let rowHeads = select(params.heads, params.kvHeads, isK);
    let pair = j % params.half;
    let rest = j / params.half; // r · rowHeads + h
    let r = rest / rowHeads;
    let rotation = ropeRotation(bitcast<u32>(positions[r]), pair, 1.0);
    let c = rotation.x;
    let s = rotation.y;
    let base = rest * params.headDim;
    let src = select(0u, params.kStart, isK) + base + r * select(params.qGap, params.kvGap, isK);
    var a = 0.0;
    var b = 0.0;
    if (isK) {
      a = k[src + ${first}];
      b = k[src + ${second}];
    } else {
      a = q[src + ${first}];
      b = q[src + ${second}];
    }
    let x0 = a * c - b * s;
    let x1 = a * s + b * c;
    if (!isK) {
      y[base + ${first}] = x0;
      y[base + ${second}] = x1;
      return;
    }
    let at = poolElement(r, rest % rowHeads, 0u);
    if (at < 0) { return; }
    for (var e = 0u; e < 2u; e++) {
      let dst = u32(at) + select(${first}, ${second}, e == 1u);
      let x = select(x0, x1, e == 1u);
      ${store('kPages', 'x')}
    }
    return;
  }
`
        : '';
      return module.build(
        undefined,
        WG,
        `  ${elementIndex('params.n')}
${rotation}  let j = i - params.pairs;
  let width = params.kvHeads * params.headDim;
  let e = j % width;
  let at = poolElement(j / width, e / params.headDim, e % params.headDim);
  if (at < 0) { return; }
  let dst = u32(at);
  ${store('vPages', rope ? 'v[params.vStart + j + j / width * params.kvGap]' : 'v[j]')}
${rope ? '' : `  ${store('kPages', 'k[j]')}`}`,
      );
    },
  };
}

/** The rows and pools of a write, and the rotation where there is one. */
function encodeWrite(
  encoder: KernelEncoder,
  t: Readonly<Record<'k' | 'v' | 'kPages' | 'vPages' | 'slots', Operand>>,
  rope:
    | {
        layout: RopeLayout;
        table: boolean;
        frequencies: Operand | GPUBufferBinding;
        q: Operand;
        y: Operand;
        positions: Operand;
        /** q is a fused q, k, v row, bound as k and v too. */
        fused: boolean;
      }
    | undefined,
): void {
  const [numPages, kvHeads, pageSize, headDim] = t.kPages.shape as [number, number, number, number];
  const heads = rope ? rope.y.shape[1]! : 0;
  const tokens = t.slots.shape[0]!;
  const half = Math.floor(headDim / 2);
  const qPairs = rope ? tokens * heads * half : 0;
  const pairs = rope ? qPairs + tokens * kvHeads * half : 0;
  const n = pairs + tokens * kvHeads * headDim;
  if (n === 0) return;
  const { k, v, kPages, vPages, slots } = t;
  const values = { n, qPairs, pairs, half, headDim, heads, kvHeads, pageSize, capacity: numPages * pageSize };
  const rows = rope?.fused ? fusedRows(heads, kvHeads, headDim) : { kStart: 0, vStart: 0, qGap: 0, kvGap: 0 };
  encoder.dispatch({
    shader: writeShader(storageOf(kPages.dtype), rope && { layout: rope.layout, table: rope.table }),
    buffers: rope
      ? [rope.q, k, v, rope.y, kPages, vPages, slots, rope.positions, rope.frequencies]
      : [k, v, kPages, vPages, slots],
    params: rope
      ? { layout: ROPE_WRITE_PARAMS, values: { ...values, ...rows } }
      : { layout: WRITE_PARAMS, values },
    workgroups: elementGrid(encoder, n),
  });
}

/** Half rows are widened to f32 first; the pools are written in their own dtype. */
const writeKernel = wgpuKernel(
  pagedKvWrite,
  (encoder, { inputs, outputs }) => {
    const [k, v, , , slots] = inputs as Operand[];
    const [kPages, vPages] = outputs as Operand[];
    encodeWithF32Activations(encoder, pagedKvWrite.name, { k, v }, {}, (rows) =>
      encodeWrite(
        encoder,
        { k: rows.k!, v: rows.v!, kPages: kPages!, vPages: vPages!, slots: slots! },
        undefined,
      ),
    );
  },
  { dtypes: FLOAT },
);

const ropeWriteKernel = wgpuKernel(
  ropePagedKvWrite,
  (encoder, { inputs, outputs, attrs }) => {
    const [q, k, v, , , slots, positions, frequencies] = inputs as (Operand | undefined)[];
    const [y, kPages, vPages] = outputs as Operand[];
    const headDim = q!.shape[2]!;
    const frequencyBinding = ropeFrequencyBinding(encoder, attrs.theta, headDim, frequencies);
    // A fused q, k, v input is bound as q, k and v at once, each read from its heads on.
    encodeWithF32Activations(encoder, ropePagedKvWrite.name, { q, k, v }, { y }, (rows, o) =>
      encodeWrite(
        encoder,
        { k: rows.k ?? rows.q!, v: rows.v ?? rows.q!, kPages: kPages!, vPages: vPages!, slots: slots! },
        {
          layout: attrs.layout,
          table: frequencies !== undefined,
          frequencies: frequencyBinding,
          q: rows.q!,
          y: o.y!,
          positions: positions!,
          fused: k === undefined,
        },
      ),
    );
  },
  { dtypes: FLOAT },
);

export const PAGED_KERNELS: readonly AnyWgpuKernel[] = [writeKernel, ropeWriteKernel, pagedAttentionKernel];
