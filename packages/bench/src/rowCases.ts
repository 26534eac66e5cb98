// Cases of kernels that read a tensor once, row by row or element by
// element: normalizations and softmax, argmax, rope, SwiGLU.

import { type AnyKernelSpec, argmax, rope, swiglu } from '@rayo/core';
import { ropeTolerance } from '@rayo/core/testing';
import { type BenchCase, elementSubset } from './case.js';
import {
  ELEMENT_TOL,
  EXACT,
  FULL_CHECK_ELEMENTS,
  type Modes,
  modes,
  SAMPLED_ELEMENTS,
} from './caseDefaults.js';

/** A kernel over rows of the last axis, with optional per-feature vectors. */
export function rows(
  family: string,
  spec: AnyKernelSpec,
  [r, n]: readonly [number, number],
  vectors: number,
  when: Modes,
  attrs: BenchCase['attrs'] = {},
): BenchCase {
  return {
    id: `${family}/${r}x${n}`,
    family,
    spec,
    inputs: [
      { shape: [r, n] },
      ...Array.from({ length: vectors }, () => ({ shape: [n], fill: 'positive' as const })),
    ],
    attrs,
    bound: 'bytes',
    x: r * n,
    ...modes(when),
    tolerance: { rtol: 1e-4, atol: 1e-5 },
  };
}

/** Rows of logits to the index of their largest value: what greedy decoding reads back. */
export function argmaxCase([r, n]: readonly [number, number], when: Modes): BenchCase {
  return { ...rows('argmax', argmax, [r, n], 0, when), tolerance: EXACT };
}

export function ropeCase([seq, heads, dim]: readonly [number, number, number], when: Modes): BenchCase {
  const positionOffset = seq === 1 ? 4095 : 0;
  return {
    id: `rope/${seq}x${heads}x${dim}`,
    family: 'rope',
    spec: rope,
    inputs: [{ shape: [seq, heads, dim] }],
    attrs: { positionOffset },
    bound: 'bytes',
    x: seq * heads * dim,
    ...modes(when),
    // The conformance suite's bound: f32 angles lose digits as positions grow.
    tolerance: ropeTolerance(positionOffset + seq - 1),
  };
}

export function swigluCase([r, n]: readonly [number, number], when: Modes): BenchCase {
  const size = r * n;
  return {
    id: `swiglu/${r}x${n}`,
    family: 'swiglu',
    spec: swiglu,
    inputs: [{ shape: [r, n] }, { shape: [r, n] }],
    bound: 'bytes',
    x: size,
    ...modes(when),
    tolerance: ELEMENT_TOL,
    ...(size > FULL_CHECK_ELEMENTS ? { subset: elementSubset(size, SAMPLED_ELEMENTS) } : {}),
  };
}
