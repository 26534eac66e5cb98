import type { ParamType } from '../params.js';
import type { ShaderModule, WgslType } from '../wgsl/module.js';
import { declareRopeFrequencies } from './ropeRotation.js';

// What the KV-cache writes (ropeKvScatter in decoding.ts and halfCache.ts,
// pagedKvWrite and ropePagedKvWrite in paged.ts) have in common, declared
// once: the uniform fields, so that their structs keep one order, and
// ropeKvScatter's bindings, position and head geometry.

/** The head geometry every write reads first. */
export const KV_WRITE_HEAD_FIELDS = [
  ['n', 'u32'],
  ['qPairs', 'u32'],
  ['pairs', 'u32'],
  ['half', 'u32'],
  ['headDim', 'u32'],
  ['heads', 'u32'],
  ['kvHeads', 'u32'],
] as const satisfies readonly (readonly [string, ParamType])[];

/**
 * With rope, where a row's k and v start in their bindings, and the elements between its row of
 * q (of k and v) and the next past its heads: 0, or a fused q, k, v row's other heads.
 */
export const FUSED_ROW_FIELDS = [
  ['kStart', 'u32'],
  ['vStart', 'u32'],
  ['qGap', 'u32'],
  ['kvGap', 'u32'],
] as const satisfies readonly (readonly [string, ParamType])[];

/**
 * ropeKvScatter's bindings in order: q, k and v (k and v as `kv`), y, the
 * caches (as `cache`), the device position where there is one, the frequencies.
 */
export function declareRopeScatterBindings(
  module: ShaderModule,
  types: { readonly kv: WgslType; readonly cache: WgslType; readonly q?: WgslType },
  device: boolean,
  table: boolean,
): void {
  // q and y are f32 unless `types.q` says otherwise (half words: u32).
  module.storage('q', types.q ?? 'f32', 'read');
  module.storage('k', types.kv, 'read');
  module.storage('v', types.kv, 'read');
  module.storage('y', types.q ?? 'f32', 'read_write');
  module.storage('kCache', types.cache, 'read_write');
  module.storage('vCache', types.cache, 'read_write');
  if (device) module.storage('at', 'i32', 'read');
  declareRopeFrequencies(module, table);
}

/**
 * WGSL: \`position\` and \`fits\` of a write: the attribute's, or the device's,
 * where a position whose rows do not fit writes nothing to the caches
 * (tokens <= maxSeq was checked on the host).
 */
export function writePosition(device: boolean): string {
  return device
    ? `let p = at[0];
  let fits = p >= 0 && u32(p) <= params.maxSeq - params.tokens;
  let position = bitcast<u32>(p);`
    : `let fits = true;
  let position = params.position;`;
}

/** The head geometry of a ropeKvScatter call from y [T, heads, headDim] and a cache [kvHeads, maxSeq, headDim]. */
export function ropeScatterGeometry(
  y: { readonly shape: readonly number[] },
  cache: { readonly shape: readonly number[] },
) {
  const [tokens, heads, headDim] = y.shape as [number, number, number];
  const [kvHeads, maxSeq] = cache.shape as [number, number];
  const half = headDim / 2;
  return { tokens, heads, headDim, kvHeads, maxSeq, half, qPairs: tokens * heads * half };
}
