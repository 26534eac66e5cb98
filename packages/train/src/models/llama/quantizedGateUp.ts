import {
  type Backend,
  type GateUpFormat,
  gateUpInputs,
  isGateUpFormat,
  type QuantActivations,
  quantizedGateUpSwiglu,
  type Tensor,
} from '@rayo/core';
import type { QuantizedLlamaLayer } from './quantizedLayers.js';

/** Rows of x up to which the fused product runs: decoding's one and a few (the GEMV kernels' M). */
export const FUSED_GATE_UP_MAX_ROWS = 4;

/**
 * The inputs and attributes of `quantizedGateUpSwiglu` for a layer's gate
 * and up projections on `rows` rows of h, or undefined where the separate
 * products are the way: more rows (a prefill streams the weights once per
 * few rows in the fused kernels), a backend without the spec, or two
 * weights the spec cannot take together (other formats, shapes, scale
 * dtypes, or zero points on one only).
 */
export function quantizedGateUpCall(
  backend: Backend,
  layer: QuantizedLlamaLayer | undefined,
  h: Tensor,
  activations: QuantActivations,
  /** An rmsNorm of h to fold in (the spec's normWeight). */
  norm?: { readonly weight: Tensor; readonly eps: number },
):
  | {
      inputs: (Tensor | undefined)[];
      attrs: { format: GateUpFormat; eps?: number; activations: QuantActivations };
    }
  | undefined {
  const gate = layer?.gate;
  const up = layer?.up;
  if (!gate || !up || h.shape[0]! > FUSED_GATE_UP_MAX_ROWS) return undefined;
  if (!backend.supports(quantizedGateUpSwiglu.name)) return undefined;
  const format = gate.format;
  if (!isGateUpFormat(format)) return undefined;
  const same =
    up.format === format &&
    up.n === gate.n &&
    up.k === gate.k &&
    up.scales.dtype === gate.scales.dtype &&
    (up.zeros === undefined) === (gate.zeros === undefined) &&
    (up.offsets === undefined) === (gate.offsets === undefined);
  if (!same) return undefined;
  return {
    inputs: gateUpInputs(h, gate, up, norm?.weight),
    attrs: norm ? { format, eps: norm.eps, activations } : { format, activations },
  };
}
