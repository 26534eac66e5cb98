import {
  type FlashPrecision,
  flashAttention,
  flashAttentionBackward,
  flashDims,
  flashScale,
  UnsupportedOnBackendError,
} from '@rayo/core';
import { cudaKernel, type KernelEncoder, type LaunchValue, launchArgs, type Operand } from '../kernel.js';
import type { PtxModule } from '../ptx/module.js';
import { checkElementCount } from './common.js';
import {
  FLASH_MMA_FORWARD_ENTRY,
  FLASH_MMA_HEAD_DIMS,
  FLASH_MMA_ROWS,
  FLASH_MMA_THREADS,
  flashMmaForwardModule,
  flashMmaForwardSharedBytes,
  flashMmaKey,
} from './flashAttentionMma.js';
import {
  FLASH_MMA_DKDV_ENTRY,
  FLASH_MMA_DQ_ENTRY,
  flashMmaBackwardSharedBytes,
  flashMmaDkdvModule,
  flashMmaDqModule,
} from './flashAttentionMmaBackward.js';
import {
  FLASH_DKDV_ENTRY,
  FLASH_DQ_ENTRY,
  FLASH_FORWARD_ENTRY,
  FLASH_MAX_HEAD_DIM,
  FLASH_ROWS,
  FLASH_THREADS,
  flashDkdvModule,
  flashDqModule,
  flashForwardModule,
  flashKey,
} from './flashAttentionRows.js';

/** The shape arguments of every flash launch, checked once. */
function flashArgs(encoder: KernelEncoder, operation: string, q: Operand, k: Operand, scaleAttr: number) {
  const d = flashDims(q, k);
  checkElementCount(operation, 'q', q.size);
  if (d.headDim > FLASH_MAX_HEAD_DIM) {
    throw new UnsupportedOnBackendError('head dimension too large for the flash attention kernels', {
      operation,
      argument: 'q',
      expected: `headDim <= ${FLASH_MAX_HEAD_DIM}`,
      actual: String(d.headDim),
    });
  }
  const heads = Math.max(d.batch * d.nHeads, d.batch * d.nKvHeads);
  if (heads > encoder.device.maxGridDim[1]) {
    throw new UnsupportedOnBackendError('too many (batch, head) pairs for one flash attention launch', {
      operation,
      argument: 'q',
      expected: `B · nHeads <= ${encoder.device.maxGridDim[1]}`,
      actual: String(heads),
    });
  }
  const scale = flashScale(scaleAttr, d.headDim);
  return {
    d,
    args: {
      tokens: d.tokens,
      batch: d.batch,
      nHeads: d.nHeads,
      group: d.nHeads / d.nKvHeads,
      scaleLog2: scale * Math.LOG2E,
      scale,
    },
  };
}

function launchRows(
  encoder: KernelEncoder,
  entry: string,
  module: (hd: number) => PtxModule,
  hd: number,
  tokens: number,
  heads: number,
  args: Record<string, number | bigint>,
): void {
  encoder.launch({
    key: flashKey(entry, hd),
    module: () => module(hd),
    entry,
    grid: [Math.ceil(tokens / FLASH_ROWS), heads],
    block: FLASH_THREADS,
    args,
  });
}

/**
 * Whether a call takes the tensor-core kernels: precision 'half', head dims
 * 64 and 128, sm_80 and later, and operands aligned for 16-byte copies.
 */
export function flashUsesMma(
  device: { readonly computeCapability?: readonly [number, number] },
  precision: FlashPrecision,
  headDim: number,
  operands: readonly Operand[],
): boolean {
  return (
    precision === 'half' &&
    FLASH_MMA_HEAD_DIMS.includes(headDim) &&
    (device.computeCapability?.[0] ?? 0) >= 8 &&
    operands.every((o) => o.ptr % 16n === 0n)
  );
}

export const flashAttentionKernel = cudaKernel(flashAttention, (encoder, { inputs, outputs, attrs }) => {
  const [q, k, v] = inputs as [Operand, Operand, Operand];
  const [out, lse] = outputs as [Operand, Operand];
  if (out.size === 0) return;
  const { d, args } = flashArgs(encoder, 'flashAttention', q, k, attrs.scale);
  if (flashUsesMma(encoder.device, attrs.precision, d.headDim, [q, k, v, out])) {
    encoder.launch({
      key: flashMmaKey(FLASH_MMA_FORWARD_ENTRY, d.headDim),
      module: () => flashMmaForwardModule(d.headDim),
      entry: FLASH_MMA_FORWARD_ENTRY,
      grid: [Math.ceil(d.tokens / FLASH_MMA_ROWS), d.batch * d.nHeads],
      block: FLASH_MMA_THREADS,
      sharedBytes: flashMmaForwardSharedBytes(d.headDim),
      args: { q: q.ptr, k: k.ptr, v: v.ptr, out: out.ptr, lse: lse.ptr, ...args },
    });
    return;
  }
  launchRows(encoder, FLASH_FORWARD_ENTRY, flashForwardModule, d.headDim, d.tokens, d.batch * d.nHeads, {
    q: q.ptr,
    k: k.ptr,
    v: v.ptr,
    out: out.ptr,
    lse: lse.ptr,
    ...args,
  });
});

export const flashAttentionBackwardKernel = cudaKernel(
  flashAttentionBackward,
  (encoder, { inputs, outputs, attrs }) => {
    const [q, k, v, out, dOut, lse] = inputs as [Operand, Operand, Operand, Operand, Operand, Operand];
    const [dq, dk, dv] = outputs as [Operand, Operand, Operand];
    if (dq.size === 0) return;
    const { d, args } = flashArgs(encoder, 'flashAttentionBackward', q, k, attrs.scale);
    // D = rowsum(dOut ∘ out) per query row, written by the dq pass for the key pass.
    const delta = encoder.scratch(4 * d.tokens * d.batch * d.nHeads);
    const common = { q: q.ptr, k: k.ptr, v: v.ptr, dOut: dOut.ptr, lse: lse.ptr, delta, ...args };
    if (flashUsesMma(encoder.device, attrs.precision, d.headDim, [q, k, v, out, dOut, dq, dk, dv])) {
      const launch = (
        entry: string,
        module: (hd: number) => PtxModule,
        heads: number,
        rest: Readonly<Record<string, LaunchValue>>,
      ) =>
        encoder.launch({
          key: flashMmaKey(entry, d.headDim),
          module: () => module(d.headDim),
          entry,
          grid: [Math.ceil(d.tokens / FLASH_MMA_ROWS), heads],
          block: FLASH_MMA_THREADS,
          sharedBytes: flashMmaBackwardSharedBytes(d.headDim),
          args: launchArgs(common, rest),
        });
      launch(FLASH_MMA_DQ_ENTRY, flashMmaDqModule, d.batch * d.nHeads, { out: out.ptr, dq: dq.ptr });
      launch(FLASH_MMA_DKDV_ENTRY, flashMmaDkdvModule, d.batch * d.nKvHeads, { dk: dk.ptr, dv: dv.ptr });
      return;
    }
    launchRows(encoder, FLASH_DQ_ENTRY, flashDqModule, d.headDim, d.tokens, d.batch * d.nHeads, {
      ...common,
      out: out.ptr,
      dq: dq.ptr,
    });
    launchRows(encoder, FLASH_DKDV_ENTRY, flashDkdvModule, d.headDim, d.tokens, d.batch * d.nKvHeads, {
      ...common,
      dk: dk.ptr,
      dv: dv.ptr,
    });
  },
);

/** Causal self-attention for training and its backward. */
export const FLASH_ATTENTION_KERNELS = [flashAttentionKernel, flashAttentionBackwardKernel] as const;
