import type { Shape } from '../shape.js';
import type { gateUpSwiglu, rmsNormMatmul, rmsNormMatmul3 } from './fused.js';
import type { AttrsOf, SpecCall } from './specCall.js';

/**
 * The normed and gated decode products as one launch description over a
 * backend's operand type `O`: y_i = rmsNorm(x)·w_iᵀ (no norm without
 * `normWeight`), or with `wUp`, y = silu(x'·w_gateᵀ) ⊙ (x'·w_upᵀ).
 */
export interface FusedLaunch<O> {
  readonly x: O;
  /** One weight, or up to three for rmsNormMatmul3, each with the output in `y` at its index. */
  readonly w: readonly O[];
  /** The up weight of gateUpSwiglu; absent otherwise. */
  readonly wUp: O | undefined;
  readonly normWeight: O | undefined;
  readonly y: readonly O[];
  readonly eps: number;
}

/** gateUpSwiglu's call: y = silu(x'·w_gateᵀ) ⊙ (x'·w_upᵀ), x' = rmsNorm(x) where a norm weight is given. */
export function gateUpSwigluLaunch<O extends { readonly shape: Shape }>(
  call: SpecCall<O, AttrsOf<typeof gateUpSwiglu>>,
): FusedLaunch<O> {
  const [x, wGate, wUp, normWeight] = call.inputs;
  return { x: x!, w: [wGate!], wUp: wUp!, normWeight, y: [call.outputs[0]!], eps: call.attrs.eps };
}

/** rmsNormMatmul's call: y = rmsNorm(x)·wᵀ. */
export function rmsNormMatmulLaunch<O extends { readonly shape: Shape }>(
  call: SpecCall<O, AttrsOf<typeof rmsNormMatmul>>,
): FusedLaunch<O> {
  const [x, normWeight, w] = call.inputs;
  return {
    x: x!,
    w: [w!],
    wUp: undefined,
    normWeight: normWeight!,
    y: [call.outputs[0]!],
    eps: call.attrs.eps,
  };
}

/** rmsNormMatmul3's call: y_i = rmsNorm(x)·w_iᵀ for the weights given (w1 and w2 optional). */
export function rmsNormMatmul3Launch<O extends { readonly shape: Shape }>(
  call: SpecCall<O, AttrsOf<typeof rmsNormMatmul3>>,
): FusedLaunch<O> {
  const [x, normWeight, ...weights] = call.inputs;
  return {
    x: x!,
    w: weights.filter((o) => o !== undefined),
    wUp: undefined,
    normWeight: normWeight!,
    y: call.outputs,
    eps: call.attrs.eps,
  };
}
