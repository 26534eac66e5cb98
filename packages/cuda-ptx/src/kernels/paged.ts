import { FLOAT, pagedAttention, pagedKvWrite, ropePagedKvWrite } from '@rayo/core';
import { type AnyCudaKernel, cudaKernel, type Operand } from '../kernel.js';
import { PtxModule } from '../ptx/module.js';
import type { R32 } from '../ptx/operands.js';
import { decodeMmaApplies, decodeMmaPageShift } from './attentionMmaPlan.js';
import { planAttention } from './attentionPlan.js';
import { asVector, BLOCK, checkElementCount, gridFor, loadPointer, loadU32 } from './common.js';
import { loadDeviceU32, type VectorWidth, vectorWidth } from './decodingAccess.js';
import { attentionTuning, attentionTypes, checkHeadDim, launchAttention } from './incrementalAttention.js';
import { launchDecodeMma } from './incrementalAttentionMma.js';
import { type CacheTypes, launchRopeRows, ropeScatterVariant } from './kvCache.js';
import { thetaPowers } from './rope.js';
import { loadAsF32, STORAGE_BYTES, storageKey, storageOf, storesOf } from './storage.js';

// Batched decoding over page pools [numPages, kvHeads, pageSize, headDim]:
// the rows' writes at device slots (with RoPE at device positions), and one
// query per sequence attending through its block table, split across blocks
// as incrementalAttention is so that one long sequence still fills the GPU.

// ---- pagedKvWrite --------------------------------------------------------------------

export function pagedWriteKey(width: VectorWidth, types: CacheTypes): string {
  return `paged/kvWrite/v${width}${storageKey([types.rows, types.cache])}`;
}

/**
 * kPages and vPages rows from k and v, counted in vectors of `width` words:
 * a grid-stride loop over the rows' vectors in order; item i of row r, kv
 * head h goes to pool row (page · kvHeads + h) · pageSize + offset of
 * slots[r], and nowhere for a slot outside the pool.
 */
export function pagedWriteModule(width: VectorWidth, types: CacheTypes): PtxModule {
  const m = new PtxModule();
  m.entry(
    'paged_kv_write',
    {
      k: 'ptr',
      v: 'ptr',
      kPages: 'ptr',
      vPages: 'ptr',
      slots: 'ptr',
      n: 'u32',
      rowVectors: 'u32',
      tokenVectors: 'u32',
      kvHeads: 'u32',
      pageSize: 'u32',
      capacity: 'u32',
    },
    (k, p) => {
      const [kIn, vIn, kPages, vPages, slots] = ['k', 'v', 'kPages', 'vPages', 'slots'].map((name) =>
        loadPointer(k, p, name),
      );
      const [n, rowVectors, tokenVectors, kvHeads, pageSize, capacity] = [
        'n',
        'rowVectors',
        'tokenVectors',
        'kvHeads',
        'pageSize',
        'capacity',
      ].map((name) => loadU32(k, p, name)) as [R32, R32, R32, R32, R32, R32];
      const rowBytes = STORAGE_BYTES[types.rows] * width;
      const cacheBytes = STORAGE_BYTES[types.cache] * width;
      k.gridStrideLoop(n, (i) => {
        const t = k.div('u32', k.reg('u32'), i, tokenVectors);
        const inToken = k.sub('u32', k.reg('u32'), i, k.mulLo('u32', k.reg('u32'), t, tokenVectors));
        const h = k.div('u32', k.reg('u32'), inToken, rowVectors);
        const e = k.sub('u32', k.reg('u32'), inToken, k.mulLo('u32', k.reg('u32'), h, rowVectors));
        const slot = loadDeviceU32(k, k.elementAddress(slots!, t, 4));
        // Negative slots (idle rows) are huge as u32.
        const ok = k.setp('lt', 'u32', k.reg('pred'), slot, capacity);
        k.predicated(ok, () => {
          const page = k.div('u32', k.reg('u32'), slot, pageSize);
          const offset = k.sub('u32', k.reg('u32'), slot, k.mulLo('u32', k.reg('u32'), page, pageSize));
          const headRow = k.madLo('u32', k.reg('u32'), page, kvHeads, h);
          const row = k.madLo('u32', k.reg('u32'), headRow, pageSize, offset);
          const dst = k.madLo('u32', k.reg('u32'), row, rowVectors, e);
          for (const [from, to] of [
            [kIn!, kPages!],
            [vIn!, vPages!],
          ] as const) {
            if (types.rows === 'f32' && types.cache === 'f32') {
              const words = k.regs('u32', width);
              k.ldGlobal('u32', asVector(words), k.elementAddress(from, i, 4 * width), { nc: true });
              k.stGlobal('u32', k.elementAddress(to, dst, 4 * width), asVector(words));
              continue;
            }
            const floats = k.regs('f32', width);
            loadAsF32(k, types.rows, floats, k.elementAddress(from, i, rowBytes));
            storesOf(k, types.cache, floats)(k.elementAddress(to, dst, cacheBytes));
          }
        });
      });
    },
    { maxThreadsPerBlock: BLOCK },
  );
  return m;
}

const writeKernel = cudaKernel(
  pagedKvWrite,
  (encoder, { inputs }) => {
    const [kIn, v, kPages, vPages, slots] = inputs as [Operand, Operand, Operand, Operand, Operand];
    if (kIn.size === 0) return;
    checkElementCount('pagedKvWrite', 'kPages', kPages.size);
    const [numPages, kvHeads, pageSize, headDim] = kPages.shape as [number, number, number, number];
    const width = vectorWidth(headDim, [kIn.ptr, v.ptr, kPages.ptr, vPages.ptr]);
    const rowVectors = headDim / width;
    const types = { rows: storageOf(kIn), cache: storageOf(kPages) };
    const n = kIn.size / width;
    encoder.launch({
      key: pagedWriteKey(width, types),
      module: () => pagedWriteModule(width, types),
      entry: 'paged_kv_write',
      grid: gridFor(encoder.device, n),
      block: BLOCK,
      args: {
        k: kIn,
        v,
        kPages,
        vPages,
        slots,
        n,
        rowVectors,
        tokenVectors: kvHeads * rowVectors,
        kvHeads,
        pageSize,
        capacity: numPages * pageSize,
      },
    });
  },
  { dtypes: FLOAT },
);

// ---- ropePagedKvWrite: ropeKvScatter's kernel with rows placed by slot ---------------------

const ropeWriteKernel = cudaKernel(
  ropePagedKvWrite,
  (encoder, { inputs, outputs, attrs }) => {
    const [q, kIn, v, kPages, vPages, slots, positions, frequencies] = inputs as [
      Operand,
      Operand | undefined,
      Operand | undefined,
      Operand,
      Operand,
      Operand,
      Operand,
      Operand | undefined,
    ];
    const table = frequencies !== undefined;
    const y = outputs[0]!;
    if (y.size === 0) return;
    checkElementCount('ropePagedKvWrite', 'kPages', kPages.size);
    const [numPages, kvHeads, pageSize, headDim] = kPages.shape as [number, number, number, number];
    const tokens = y.shape[0]!;
    checkElementCount('ropePagedKvWrite', 'q', y.size + 2 * tokens * kvHeads * headDim);
    const variant = ropeScatterVariant(
      encoder.device,
      attrs.layout,
      [tokens, y.shape[1]!, headDim],
      kvHeads,
      {
        types: { rows: storageOf(q), cache: storageOf(kPages) },
        table,
        paged: true,
      },
    );
    launchRopeRows(
      encoder,
      variant,
      { q, kIn, v, y, kvHeads },
      { y, kCache: kPages, vCache: vPages, slots, positions, pageSize, capacity: numPages * pageSize },
      frequencies ? { frequencies } : thetaPowers('ropePagedKvWrite', attrs.theta, headDim),
    );
  },
  { dtypes: FLOAT },
);

// ---- pagedAttention ------------------------------------------------------------------

const attentionKernel = cudaKernel(
  pagedAttention,
  (encoder, { inputs, outputs, attrs }) => {
    const [q, kPages, vPages, blockTables, seqLens] = inputs as [Operand, Operand, Operand, Operand, Operand];
    const out = outputs[0]!;
    if (out.size === 0) return;
    const [batch, nHeads, headDim] = q.shape as [number, number, number];
    const [numPages, nKvHeads, pageSize] = kPages.shape as [number, number, number, number];
    const maxPages = blockTables.shape[1]!;
    checkHeadDim('pagedAttention', headDim);
    checkElementCount('pagedAttention', 'kPages', kPages.size);
    const scale = attrs.scale === 0 ? 1 / Math.sqrt(headDim) : attrs.scale;
    const shape = { nHeads, nKvHeads, headDim };
    const mmaPageShift = decodeMmaPageShift(pageSize);
    if (mmaPageShift !== undefined && decodeMmaApplies(encoder, shape, q, kPages, vPages)) {
      const pages = { blockTables, seqLens, pageSize, maxPages, kvHeads: nKvHeads, numPages };
      launchDecodeMma(
        encoder,
        shape,
        { q, kCache: kPages, vCache: vPages, scale },
        { kind: 'pages', batch, pageShift: mmaPageShift, args: pages, capacity: maxPages * pageSize },
        out,
      );
      return;
    }
    const width = vectorWidth(headDim, [q.ptr, kPages.ptr, vPages.ptr]);
    // The lengths are on the device: plan every sequence for its block table's capacity.
    const planned = planAttention(
      encoder.device,
      { nHeads, nKvHeads, headDim, seqLen: maxPages * pageSize, batch },
      width,
      attentionTuning(encoder),
    );
    // A power-of-two page size (the default 16) finds a token's page by a shift.
    const pageShift = Number.isInteger(Math.log2(pageSize)) ? { pageShift: Math.log2(pageSize) } : {};
    const plan = {
      ...planned,
      config: { ...planned.config, paged: true, ...pageShift, ...attentionTypes(q, kPages) },
    };
    const args = {
      q,
      kCache: kPages,
      vCache: vPages,
      blockTables,
      seqLens,
      pageSize,
      maxPages,
      kvHeads: nKvHeads,
      numPages,
      splitTokens: plan.splitTokens,
      group: nHeads / nKvHeads,
      scale,
    };
    launchAttention(encoder, plan, args, out, { rows: batch * nHeads, batch });
  },
  { dtypes: FLOAT },
);

/** The paged KV cache's kernels: the writes and the attention. */
export const PAGED_KERNELS: readonly AnyCudaKernel[] = [writeKernel, ropeWriteKernel, attentionKernel];
