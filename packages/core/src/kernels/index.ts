import type { AnyKernelSpec } from '../kernel.js';
import * as cast from './cast.js';
import * as causalAttention from './causalAttention.js';
import * as decoding from './decoding.js';
import * as elementwise from './elementwise.js';
import * as embedding from './embedding.js';
import * as flashAttention from './flashAttention.js';
import * as fused from './fused.js';
import * as loss from './loss.js';
import * as lossScaling from './lossScaling.js';
import * as matmul from './matmul.js';
import * as memory from './memory.js';
import * as normalization from './normalization.js';
import * as optimizer from './optimizer.js';
import * as pagedAttention from './pagedAttention.js';
import * as quantized from './quantized.js';
import * as quantizedGateUp from './quantizedGateUp.js';
import * as quantizeRows from './quantizeRows.js';
import * as reduction from './reduction.js';
import * as rope from './rope.js';
import * as ropeAttention from './ropeAttention.js';
import * as softmax from './softmax.js';

export * from './activations.js';
export * from './cast.js';
export * from './causalAttention.js';
export * from './decoding.js';
export * from './elementwise.js';
export * from './embedding.js';
export * from './flashAttention.js';
export type { Formula, FormulaPrimitive } from './formula.js';
/** The expression language of element formulas (the activations), for backends' code generators. */
export * as formulas from './formula.js';
export * from './fused.js';
export * from './loss.js';
export * from './lossScaling.js';
export * from './matmul.js';
export * from './memory.js';
export * from './normalization.js';
export * from './optimizer.js';
export * from './pagedAttention.js';
export * from './quantized.js';
export * from './quantizedGateUp.js';
export * from './quantizeRows.js';
export * from './reduction.js';
export * from './rope.js';
export * from './ropeAttention.js';
export * from './softmax.js';

function isSpec(value: unknown): value is AnyKernelSpec {
  return (
    typeof value === 'object' &&
    value !== null &&
    typeof (value as AnyKernelSpec).name === 'string' &&
    typeof (value as AnyKernelSpec).infer === 'function' &&
    typeof (value as AnyKernelSpec).reference === 'function'
  );
}

const families = [
  memory,
  cast,
  elementwise,
  reduction,
  softmax,
  normalization,
  rope,
  matmul,
  decoding,
  ropeAttention,
  causalAttention,
  flashAttention,
  pagedAttention,
  optimizer,
  lossScaling,
  loss,
  embedding,
  fused,
  quantized,
  quantizedGateUp,
  quantizeRows,
];

/** Every kernel spec rayo defines, in family order. Backends implement all of them. */
export const KERNELS: readonly AnyKernelSpec[] = Object.freeze(
  families.flatMap((m) => Object.values(m).filter(isSpec)),
);

const byName = new Map(KERNELS.map((s) => [s.name, s]));

export function kernelByName(name: string): AnyKernelSpec | undefined {
  return byName.get(name);
}
