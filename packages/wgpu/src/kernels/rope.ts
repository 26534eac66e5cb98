import { FLOAT, isHalf, rope, UnsupportedOnBackendError } from '@rayo/core';
import { type AnyWgpuKernel, wgpuKernel } from '../kernel.js';
import { paramLayout } from '../params.js';
import { declareHalf, loadScalar } from '../wgsl/half.js';
import { ShaderModule } from '../wgsl/module.js';
import { elementGrid, elementIndex, WG } from './common.js';
import {
  declareRopeFrequencies,
  ropeFrequencyBinding,
  ropeRotationSource,
  tableKey,
} from './ropeRotation.js';

// One invocation per rotated pair; the rotation (ropeRotation.ts) is
// exact in the position. A position offset held in a device tensor is read
// by the shader (and added to the parameter, then 0), so a recorded batch
// replays at whatever position was last written there. A frequency table
// (scaled RoPE) replaces theta's frequencies; the rest is the same.

const PARAMS = paramLayout([
  ['pairs', 'u32'],
  ['half', 'u32'],
  ['headDim', 'u32'],
  ['heads', 'u32'],
  ['positionOffset', 'u32'],
  /** −1 to rotate backwards. */
  ['sign', 'f32'],
] as const);

/** Positions are u32 in the shaders. */
export function checkRopePositions(kernel: string, argument: string, last: number): void {
  if (last > 0xffffffff) {
    throw new UnsupportedOnBackendError('positions are 32-bit on the GPU', {
      operation: kernel,
      argument,
      expected: `a last position of at most ${0xffffffff}`,
      actual: String(last),
    });
  }
}

export type RopeLayout = 'half' | 'interleaved';

function ropeShader(layout: RopeLayout, device: boolean, table: boolean) {
  // Interleaved pairs are adjacent elements: pair p is vec2 element p.
  const interleaved = layout === 'interleaved';
  return {
    key: `rope/rope/${layout}${device ? '/device' : ''}${tableKey(table)}/wg${WG}`,
    kernel: 'rope',
    code: () => {
      const module = new ShaderModule().params(PARAMS);
      module.storage('x', interleaved ? 'vec2<f32>' : 'f32', 'read');
      module.storage('y', interleaved ? 'vec2<f32>' : 'f32', 'read_write');
      if (device) module.storage('offset', 'i32', 'read');
      declareRopeFrequencies(module, table);
      module.declare(ropeRotationSource(table));
      return module.build(
        undefined,
        WG,
        `  ${elementIndex('params.pairs')}
  let pair = i % params.half;
  let rest = i / params.half; // s · heads + h
  let position = params.positionOffset${device ? ' + bitcast<u32>(offset[0])' : ''} + rest / params.heads;
  let rotation = ropeRotation(position, pair, params.sign);
  let c = rotation.x;
  let s = rotation.y;
${
  interleaved
    ? `  let v = x[i];
  y[i] = vec2<f32>(v.x * c - v.y * s, v.x * s + v.y * c);`
    : `  let ia = rest * params.headDim + pair;
  let ib = ia + params.half;
  let a = x[ia];
  let b = x[ib];
  y[ia] = a * c - b * s;
  y[ib] = a * s + b * c;`
}`,
      );
    },
  };
}

/**
 * rope of half x into half y, one invocation per u32 word of y (pairs of
 * the half layout straddle words, so each invocation rotates its own two
 * elements from their partners; there are as many words as pairs).
 */
function halfRopeShader(layout: RopeLayout, device: boolean, table: boolean, dtype: 'f16' | 'bf16') {
  const [pair, first, second, isFirst] =
    layout === 'half'
      ? ['d % params.half', 'pair', 'pair + params.half', 'd < params.half']
      : ['d / 2u', '2u * pair', '2u * pair + 1u', 'd % 2u == 0u'];
  return {
    key: `rope/rope/${layout}${device ? '/device' : ''}${tableKey(table)}/${dtype}/wg${WG}`,
    kernel: 'rope',
    code: () => {
      const module = new ShaderModule();
      module.storage('x', 'u32', 'read');
      module.storage('y', 'u32', 'read_write');
      if (device) module.storage('offset', 'i32', 'read');
      declareRopeFrequencies(module, table);
      module.declare(ropeRotationSource(table));
      declareHalf(module, dtype);
      return module.build(
        PARAMS,
        WG,
        `  ${elementIndex('params.pairs')}
  var bits = 0u;
  for (var j = 0u; j < 2u; j++) {
    let e = 2u * i + j;
    let d = e % params.headDim;
    let rest = e / params.headDim; // s · heads + h
    let base = rest * params.headDim;
    let pair = ${pair};
    let position = params.positionOffset${device ? ' + bitcast<u32>(offset[0])' : ''} + rest / params.heads;
    let rotation = ropeRotation(position, pair, params.sign);
    let a = ${loadScalar(dtype, 'x', `base + ${first}`)};
    let b = ${loadScalar(dtype, 'x', `base + ${second}`)};
    let v = select(a * rotation.y + b * rotation.x, a * rotation.x - b * rotation.y, ${isFirst});
    bits |= to_${dtype}(v) << (16u * j);
  }
  y[i] = bits;`,
      );
    },
  };
}

export const ROPE_KERNELS: readonly AnyWgpuKernel[] = [
  wgpuKernel(
    rope,
    (encoder, { inputs, outputs, attrs }) => {
      const x = inputs[0]!;
      const offset = inputs[1];
      const frequencies = inputs[2];
      const table = frequencies !== undefined;
      const [seq, heads, headDim] = x.shape as [number, number, number];
      const half = headDim / 2;
      const pairs = seq * heads * half;
      if (pairs === 0) return;
      checkRopePositions('rope', 'attrs.positionOffset', attrs.positionOffset + seq - 1);
      const dtype = x.dtype;
      encoder.dispatch({
        shader: isHalf(dtype)
          ? halfRopeShader(attrs.layout, offset !== undefined, table, dtype)
          : ropeShader(attrs.layout, offset !== undefined, table),
        buffers: [
          x,
          outputs[0]!,
          ...(offset ? [offset] : []),
          ropeFrequencyBinding(encoder, attrs.theta, headDim, frequencies),
        ],
        params: {
          layout: PARAMS,
          values: {
            pairs,
            half,
            headDim,
            heads,
            positionOffset: attrs.positionOffset,
            sign: attrs.inverse ? -1 : 1,
          },
        },
        workgroups: elementGrid(encoder, pairs),
      });
    },
    { dtypes: FLOAT },
  ),
];
