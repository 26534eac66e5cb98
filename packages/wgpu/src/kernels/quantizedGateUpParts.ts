import { type QuantActivations, type QuantFormat, quantizedGateUpSwiglu } from '@rayo/core';
import type { KernelEncoder, Operand } from '../kernel.js';
import { paramLayout } from '../params.js';
import { ACTIVATION_FUNCTIONS_WGSL, activationWgsl } from '../wgsl/activations.js';
import { ShaderModule } from '../wgsl/module.js';
import { elementGrid, elementIndex, WG } from './common.js';
import { f32Scratch } from './halfEdges.js';
import { encodeQuantizedF32, pairInOnePass, type QuantWeightOperands, streamsRows } from './quantized.js';

// The gate·up·SwiGLU pair of a format the pair shader (quantizedGemv.ts)
// does not read (all but q8, q4g32 and q4g128). Up to 4 rows: one pass of
// the streaming shader over both weights where the device binds them all
// (11 storage buffers for q4k with a norm, more than many browser adapters
// allow), else the gate's product into f32 scratch and then the up product,
// whose epilogue stores silu(gate) · up. More rows take both products into
// scratch and a SwiGLU dispatch.

const PARAMS = paramLayout([['count', 'u32']] as const);

const SWIGLU_PARTS = {
  key: `quantizedGateUpSwiglu/parts/wg${WG}`,
  kernel: quantizedGateUpSwiglu.name,
  code: () => {
    const module = new ShaderModule().params(PARAMS);
    module.storage('gate', 'f32', 'read');
    module.storage('up', 'f32', 'read');
    module.storage('y', 'f32', 'read_write');
    module.declare(ACTIVATION_FUNCTIONS_WGSL);
    const body = `  ${elementIndex('params.count')}\n  y[i] = ${activationWgsl('silu', 'gate[i]')} * up[i];`;
    return module.build(undefined, WG, body);
  },
};

/** y = silu(x · gateᵀ) ⊙ (x · upᵀ) for f32 x [M, K] and y [M, N]: in one pass, two, or two products and a SwiGLU (see the top). */
export function encodeGateUpInParts(
  encoder: KernelEncoder,
  ops: {
    x: Operand;
    gate: QuantWeightOperands;
    up: QuantWeightOperands;
    y: Operand;
    /** An rmsNorm folded into both products (their rows streaming, see streamsRows). */
    norm?: { readonly weight: Operand; readonly eps: number } | undefined;
  },
  attrs: { readonly format: QuantFormat; readonly activations?: QuantActivations },
): void {
  const { x, y } = ops;
  const { format } = attrs;
  if (y.size === 0) return;
  const product = { format, activations: attrs.activations, beta: 0 };
  if (pairInOnePass(encoder, x.shape[0]!, format, ops.gate, ops.up, ops.norm !== undefined)) {
    encodeQuantizedF32(encoder, x, ops.gate, undefined, y, { ...product, up: ops.up }, ops.norm);
    return;
  }
  if (streamsRows(encoder, x.shape[0]!, format)) {
    const gate = f32Scratch(encoder, y, quantizedGateUpSwiglu.name, 'gate');
    encodeQuantizedF32(encoder, x, ops.gate, undefined, gate, product, ops.norm);
    encodeQuantizedF32(encoder, x, ops.up, gate, y, { ...product, gated: true }, ops.norm);
    return;
  }
  const products = (['gate', 'up'] as const).map((name) => {
    const out = f32Scratch(encoder, y, quantizedGateUpSwiglu.name, name);
    encodeQuantizedF32(encoder, x, ops[name], undefined, out, product, ops.norm);
    return out;
  });
  encoder.dispatch({
    shader: SWIGLU_PARTS,
    buffers: [...products, y],
    params: { layout: PARAMS, values: { count: y.size } },
    workgroups: elementGrid(encoder, y.size),
  });
}
