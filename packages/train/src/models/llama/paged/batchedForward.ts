import { pagedAttention, rmsNorm, ropePagedKvWrite, type Tensor, type TrackingRunner } from '@rayo/core';
import type { LlamaDecoder } from '../decoder.js';
import { embed, headLogits, mlp } from '../forward.js';
import { biased, headNorm, project, qkvHalfOperand, withFrequencies } from '../projections.js';

/** One layer's page pools: [pages, kvHeads, pageSize, headDim] each. */
export interface LayerPages {
  readonly k: Tensor;
  readonly v: Tensor;
}

/**
 * What a batched step reads on the device, one row per sequence of a batch
 * of B rows (idle rows: slot −1, length 0): the token each embeds, its
 * position (RoPE's, and its cache row), the slot its keys and values go to
 * (page · pageSize + offset), its block table and the rows it attends over.
 */
export interface BatchedStepInputs {
  /** i32 [B]. */
  readonly tokens: Tensor;
  /** i32 [B]. */
  readonly positions: Tensor;
  /** i32 [B]. */
  readonly slots: Tensor;
  /** i32 [B, maxPagesPerSeq]. */
  readonly blockTables: Tensor;
  /** i32 [B]: position + 1 for a running row, 0 for an idle one. */
  readonly seqLens: Tensor;
}

/**
 * One decode step of B sequences over one copy of the weights: the B tokens'
 * rows go through every product together (one read of each weight for the
 * batch), each row is rotated at its own position and written to its page
 * slot, and each attends over its own pages. Returns the logits [B, vocab];
 * every tensor it allocates is tracked by `run`, and every per-step value is
 * a device tensor, so a recorded step replays for new tokens and tables.
 */
export function batchedDecodeForward(
  d: LlamaDecoder,
  run: TrackingRunner,
  pages: readonly LayerPages[],
  inputs: BatchedStepInputs,
): Tensor {
  const { config } = d;
  const { rmsNormEps: eps, numAttentionHeads: heads, numKeyValueHeads: kvHeads, headDim, ropeTheta } = config;
  let x = embed(d, run, inputs.tokens);
  const b = x.shape[0]!;
  d.weights.layers.forEach((w, i) => {
    const quantized = d.quantizedLayers?.[i];
    const pool = pages[i]!;
    // The norms and SwiGLU write the products' half operands, as for a chunk of a prompt.
    const out = qkvHalfOperand(d, b, w, quantized);
    const h = run.run1(rmsNorm, [x, w.inputNorm], { eps, ...(out ? { out } : {}) });
    const projected = (name: 'q' | 'k' | 'v' | 'qkv') =>
      biased(run, project(d, run, h, w, quantized, name), w[`${name}Bias`]);
    // Fused q, k and v weights: one product, read in place by the rope and the write.
    const rows =
      w.qkv || quantized?.qkv
        ? [projected('qkv').reshape([b, heads + 2 * kvHeads, headDim]), undefined, undefined]
        : [
            headNorm(run, config, projected('q'), w.qNorm).reshape([b, heads, headDim]),
            headNorm(run, config, projected('k'), w.kNorm).reshape([b, kvHeads, headDim]),
            projected('v'),
          ];
    const [qRot] = run.run(
      ropePagedKvWrite,
      withFrequencies(d, [...rows, pool.k, pool.v, inputs.slots, inputs.positions]),
      { theta: ropeTheta, layout: 'half' },
    );
    const attended = run
      .run1(pagedAttention, [qRot!, pool.k, pool.v, inputs.blockTables, inputs.seqLens])
      .reshape([b, heads * headDim]);
    const x1 = biased(run, project(d, run, attended, w, quantized, 'o', x), w.oBias);
    x = project(d, run, mlp(d, run, w, quantized, x1, true), w, quantized, 'down', x1);
  });
  return headLogits(d, run, x);
}
