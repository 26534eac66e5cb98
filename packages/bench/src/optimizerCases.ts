// A training step's optimizer cases: AdamW over one tensor or a model's
// tensors, and clipping gradients by their global norm.

import { adamwStep, clipByGlobalNorm, multiTensorAdamw } from '@rayo/core';
import { type BenchCase, type BenchInput, elementSubset } from './case.js';
import { ELEMENT_TOL, FULL_CHECK_ELEMENTS, type Modes, modes, SAMPLED_ELEMENTS } from './caseDefaults.js';

export function label(count: number): string {
  const exponent = Math.log10(count);
  return Number.isInteger(exponent) ? `1e${exponent}` : String(count);
}

export function adamw(params: number, when: Modes): BenchCase {
  return {
    id: `adamw/${label(params)}`,
    family: 'adamw',
    spec: adamwStep,
    // param, grad, m, v (v is a second moment: positive).
    inputs: [
      { shape: [params] },
      { shape: [params] },
      { shape: [params] },
      { shape: [params], fill: 'positive' },
    ],
    attrs: { lr: 1e-3, beta1: 0.9, beta2: 0.999, eps: 1e-8, weightDecay: 0.01, step: 10 },
    bound: 'bytes',
    x: params,
    ...modes(when),
    tolerance: ELEMENT_TOL,
    ...(params > FULL_CHECK_ELEMENTS ? { subset: elementSubset(params, SAMPLED_ELEMENTS) } : {}),
  };
}

/** The tensor shapes of a GPT-2-like model: embeddings, 12 tensors per layer, the final norm. */
export function gptShapes(layers: number, dim: number, vocab: number, context: number): number[][] {
  const layer = [
    [dim],
    [dim],
    [3 * dim, dim],
    [3 * dim],
    [dim, dim],
    [dim],
    [dim],
    [dim],
    [4 * dim, dim],
    [4 * dim],
    [dim, 4 * dim],
    [dim],
  ];
  return [[vocab, dim], [context, dim], ...Array.from({ length: layers }, () => layer).flat(), [dim], [dim]];
}

/**
 * multiTensorAdamw over a model's tensors, as a training step calls it: the
 * gradients clipped by a device norm (large enough that the clip acts),
 * vectors undecayed.
 */
export function adamwMulti(name: string, shapes: readonly number[][], when: Modes): BenchCase {
  const params = shapes.reduce((sum, s) => sum + s.reduce((a, b) => a * b, 1), 0);
  const norm: BenchInput = { shape: [], fill: () => [1000] };
  return {
    id: `adamwMulti/${name}`,
    family: 'adamwMulti',
    spec: multiTensorAdamw,
    inputs: [
      undefined,
      undefined,
      norm,
      undefined,
      ...shapes.flatMap((shape) => [{ shape }, { shape }, { shape }, { shape, fill: 'positive' as const }]),
    ],
    attrs: {
      lr: 1e-3,
      step: 10,
      weightDecay: shapes.map((s) => (s.length > 1 ? 0.01 : 0)),
      maxNorm: 1,
    },
    bound: 'bytes',
    x: params,
    ...modes(when),
    tolerance: ELEMENT_TOL,
  };
}

export function clip(total: number, when: Modes): BenchCase {
  // Gradients of several sizes, as a model's parameters have.
  const parts = [total / 2, total / 4, total / 8, total / 8];
  return {
    id: `clip/${label(total)}`,
    family: 'clip',
    spec: clipByGlobalNorm,
    inputs: parts.map((p) => ({ shape: [p] })),
    // Below the norm of uniform values (about 0.58·√n): every case scales.
    attrs: { maxNorm: 1 },
    bound: 'bytes',
    x: total,
    ...modes(when),
    tolerance: { rtol: 1e-4, atol: 1e-7 },
  };
}
