import { causalAttention, FLOAT, UnsupportedOnBackendError } from '@rayo/core';
import { cudaKernel, type KernelEncoder, type Launch, type Operand } from '../kernel.js';
import {
  MMA_ENTRY,
  MMA_HEAD_DIMS,
  MMA_ROWS,
  MMA_THREADS,
  type MmaAttentionConfig,
  mmaAttentionKey,
  mmaAttentionModule,
  mmaSharedBytes,
} from './causalAttentionMma.js';
import {
  TILED_ENTRY,
  TILED_MAX_HEAD_DIM,
  TILED_ROWS,
  TILED_THREADS,
  type TiledAttentionConfig,
  tiledAttentionKey,
  tiledAttentionModule,
  tiledSharedBytes,
} from './causalAttentionTiled.js';
import { checkElementCount } from './common.js';
import { type FloatStorage, storageOf } from './storage.js';

// Prefill attention: half caches with head dims 64 and 128 on tensor cores
// (sm_80 and later), everything else on the f32 tile kernel.

/** The tensor-core configuration for a call, or undefined where the tile kernel takes it. */
export function mmaAttentionConfig(
  device: { readonly computeCapability?: readonly [number, number] },
  q: Operand,
  kCache: Operand,
  vCache: Operand,
  out: Operand,
): MmaAttentionConfig | undefined {
  const cache = kCache.dtype;
  const headDim = q.shape[2]!;
  if (cache !== 'f16' && cache !== 'bf16') return undefined;
  if (!MMA_HEAD_DIMS.includes(headDim) || (device.computeCapability?.[0] ?? 0) < 8) return undefined;
  // 16-byte copies of cache rows and of q; paired stores of out.
  if ([q, kCache, vCache, out].some((o) => o.ptr % 16n !== 0n)) return undefined;
  return { headDim, cache, q: storageOf(q), ...outStorage(q, out) };
}

export function recordCausalAttention(
  encoder: KernelEncoder,
  [q, kCache, vCache]: readonly [Operand, Operand, Operand],
  out: Operand,
  position: number,
  scale: number,
): void {
  const [tokens, nHeads, headDim] = q.shape as [number, number, number];
  const [nKvHeads, maxSeq] = kCache.shape as [number, number, number];
  if (out.size === 0) return;
  checkElementCount('causalAttention', 'q', q.size);
  checkElementCount('causalAttention', 'kCache', kCache.size);
  const group = nHeads / nKvHeads;
  const args = {
    q,
    kCache,
    vCache,
    out,
    tokens,
    nHeads,
    group,
    maxSeq,
    position,
    scaleLog2: (scale === 0 ? 1 / Math.sqrt(headDim) : scale) * Math.LOG2E,
  };
  const rows = tokens * group;
  const mma = mmaAttentionConfig(encoder.device, q, kCache, vCache, out);
  const tiles = Math.ceil(rows / (mma ? MMA_ROWS : TILED_ROWS));
  // Grid (kv heads, row tiles): the tiles of one kv head along y.
  const maxTiles = encoder.device.maxGridDim[1];
  if (tiles > maxTiles) {
    throw new UnsupportedOnBackendError('chunk too long for one causal attention launch', {
      operation: 'causalAttention',
      argument: 'q',
      expected: `T · nHeads / nKvHeads <= ${maxTiles * (mma ? MMA_ROWS : TILED_ROWS)} (shorter chunks)`,
      actual: String(rows),
    });
  }
  encoder.launch({ ...(mma ? mmaKernel(mma) : tiledKernel(q, kCache, out)), grid: [nKvHeads, tiles], args });
}

/** What a causalAttention launch takes from the kernel that serves it: all but grid and arguments. */
type AttentionKernel = Omit<Launch, 'grid' | 'args'>;

function mmaKernel(c: MmaAttentionConfig): AttentionKernel {
  return {
    key: mmaAttentionKey(c),
    module: () => mmaAttentionModule(c),
    entry: MMA_ENTRY,
    block: MMA_THREADS,
    sharedBytes: mmaSharedBytes(c.headDim),
  };
}

/** out's storage where it is not q's (attrs.out), for a kernel configuration. */
function outStorage(q: Operand, out: Operand): { out?: FloatStorage } {
  return out.dtype === q.dtype ? {} : { out: storageOf(out) };
}

function tiledKernel(q: Operand, kCache: Operand, out: Operand): AttentionKernel {
  const headDim = q.shape[2]!;
  if (headDim > TILED_MAX_HEAD_DIM) {
    throw new UnsupportedOnBackendError('head dimension too large for the causal attention kernel', {
      operation: 'causalAttention',
      argument: 'q',
      expected: `headDim <= ${TILED_MAX_HEAD_DIM}, or ${MMA_HEAD_DIMS.join(' or ')} with half caches`,
      actual: String(headDim),
    });
  }
  const c: TiledAttentionConfig = {
    headDim,
    q: storageOf(q),
    cache: storageOf(kCache),
    ...outStorage(q, out),
  };
  return {
    key: tiledAttentionKey(c),
    module: () => tiledAttentionModule(c),
    entry: TILED_ENTRY,
    block: TILED_THREADS,
    sharedBytes: tiledSharedBytes(headDim),
  };
}

export const causalAttentionKernel = cudaKernel(
  causalAttention,
  (encoder, { inputs, outputs, attrs }) =>
    recordCausalAttention(
      encoder,
      [inputs[0]!, inputs[1]!, inputs[2]!],
      outputs[0]!,
      attrs.position,
      attrs.scale,
    ),
  { dtypes: FLOAT },
);
