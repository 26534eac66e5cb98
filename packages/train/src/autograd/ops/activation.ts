import {
  geluBackward,
  gelu as geluSpec,
  type KernelSpec,
  type NoAttrs,
  reluBackward,
  relu as reluSpec,
  sigmoidBackward,
  sigmoid as sigmoidSpec,
  siluBackward,
  silu as siluSpec,
  swigluBackward,
  swiglu as swigluSpec,
  tanhBackward,
  tanh as tanhSpec,
} from '@rayo/core';
import type { Tape, Variable } from '../tape.js';

/** An activation whose backward kernel takes the forward input (`x`) or output (`y`). */
function activation(forward: KernelSpec<NoAttrs>, backward: KernelSpec<NoAttrs>, saved: 'x' | 'y') {
  return (tape: Tape, x: Variable): Variable => {
    const y = tape.run1(forward, [x.value]);
    const read = saved === 'x' ? x.value : y;
    return tape.record(y, [x], (dy) => [tape.run1(backward, [dy, read])], [read]);
  };
}

export const relu = activation(reluSpec, reluBackward, 'x');
/** GELU, tanh approximation. */
export const gelu = activation(geluSpec, geluBackward, 'x');
export const silu = activation(siluSpec, siluBackward, 'x');
export const sigmoid = activation(sigmoidSpec, sigmoidBackward, 'y');
export const tanh = activation(tanhSpec, tanhBackward, 'y');

export type ActivationName = 'relu' | 'gelu' | 'silu' | 'sigmoid' | 'tanh';

export const ACTIVATIONS: Readonly<Record<ActivationName, (tape: Tape, x: Variable) => Variable>> = {
  relu,
  gelu,
  silu,
  sigmoid,
  tanh,
};

/** `silu(gate) · up`. */
export function swiglu(tape: Tape, gate: Variable, up: Variable): Variable {
  const y = tape.run1(swigluSpec, [gate.value, up.value]);
  return tape.record(y, [gate, up], (dy) => tape.run(swigluBackward, [dy, gate.value, up.value]), [
    gate.value,
    up.value,
  ]);
}
