import { FLOAT, isHalf, rope, UnsupportedOnBackendError } from '@rayo/core';
import { type AnyWgpuKernel, wgpuKernel } from '../kernel.js';
import { paramLayout } from '../params.js';
import { declareHalf, loadScalar } from '../wgsl/half.js';
import { ShaderModule } from '../wgsl/module.js';
import { elementGrid, elementIndex, WG } from './common.js';

// One invocation per rotated pair. The angle position · theta^(−2i/headDim)
// reaches thousands of radians, so it is never formed in f32: the frequency
// in turns is split into two 12-bit halves and the position into 12-bit
// pieces, every piece product is exact, and only their fractional parts are
// added. The cosine and sine of that fraction of a turn come from polynomials,
// not from WGSL's cos and sin: those need only be accurate to about 2^−11 on
// [−π, π] (SwiftShader's are), far coarser than an f32 rotation. A position
// offset held in a device tensor is read by the shader (and added to the
// parameter, then 0), so a recorded batch replays at whatever position was
// last written there. A frequency table (scaled RoPE) replaces the power of
// theta as the frequency; the rest is the same.

const PARAMS = paramLayout([
  ['pairs', 'u32'],
  ['half', 'u32'],
  ['headDim', 'u32'],
  ['heads', 'u32'],
  ['positionOffset', 'u32'],
  /** −2 · log2(theta) / headDim: frequency i is exp2(i · logStep). */
  ['logStep', 'f32'],
  /** −1 to rotate backwards. */
  ['sign', 'f32'],
] as const);

/**
 * WGSL `ropeRotation(position, pair, logStep, sign)`: the cosine and sine of
 * sign · position · frequency radians, for every rope shader, where pair's
 * frequency is the WGSL expression `frequency` (in `pair` and `logStep`).
 */
function ropeRotationWgsl(frequency: string): string {
  return `
/** fract(a · b) for a < 2^12 times a power of two and b with at most 12 significant bits: the product is exact. */
fn turns(a: f32, b: f32) -> f32 { return fract(a * b); }

/** position · ${frequency.replace('f32(pair) * ', 'pair · ')} radians as a fraction of a turn, in [0, 1). */
fn ropeTurns(position: u32, pair: u32, logStep: f32) -> f32 {
  // The frequency in turns per position, and its split into 12 + 12 significant bits.
  let g = ${frequency} * 0.15915494309189535;
  let gh = bitcast<f32>(bitcast<u32>(g) & 0xfffff000u);
  let gl = g - gh;
  let p0 = f32(position & 0xfffu);
  let p1 = f32((position >> 12u) & 0xfffu) * 4096.0;
  let p2 = f32(position >> 24u) * 16777216.0;
  var t = turns(p0, gh);
  t = fract(t + turns(p0, gl));
  t = fract(t + turns(p1, gh));
  t = fract(t + turns(p1, gl));
  t = fract(t + turns(p2, gh));
  return fract(t + turns(p2, gl));
}

/**
 * (cos, sin) of turn t in [−1, 1]: the nearest quarter turn q is split off
 * exactly, and the remainder r (|r| <= π/4 radians) goes to Cephes' single
 * precision minimax polynomials, accurate to about an ulp.
 */
fn cosSinTurns(t: f32) -> vec2<f32> {
  let q = round(4.0 * t);
  let r = (t - 0.25 * q) * 6.283185307179586;
  let z = r * r;
  let s = ((-1.9515295891e-4 * z + 8.3321608736e-3) * z - 1.6666654611e-1) * z * r + r;
  let c = ((2.443315711809948e-5 * z - 1.388731625493765e-3) * z + 4.166664568298827e-2) * z * z - 0.5 * z + 1.0;
  // Rotating (c, s) by q quarter turns.
  switch (i32(q) & 3) {
    case 1: { return vec2<f32>(-s, c); }
    case 2: { return vec2<f32>(-c, -s); }
    case 3: { return vec2<f32>(s, -c); }
    default: { return vec2<f32>(c, s); }
  }
}

/** (cos, sin) of sign · position · exp2(pair · logStep) radians; sign is ±1. */
fn ropeRotation(position: u32, pair: u32, logStep: f32, sign: f32) -> vec2<f32> {
  return cosSinTurns(sign * ropeTurns(position, pair, logStep));
}`;
}

/** `ropeRotation` with pair i's frequency exp2(i · logStep): theta^(−2i/headDim). */
export const ROPE_ROTATION_WGSL = ropeRotationWgsl('exp2(f32(pair) * logStep)');

/**
 * `ropeRotation` with pair i's frequency read from the storage array
 * `frequencies` (rope's optional table; logStep unused), which the shader
 * binds.
 */
export const ROPE_TABLE_ROTATION_WGSL = ropeRotationWgsl('frequencies[pair]');

/** The rotation of a shader that binds a frequency table (`table`), or of theta's frequencies. */
export function ropeRotationSource(table: boolean): string {
  return table ? ROPE_TABLE_ROTATION_WGSL : ROPE_ROTATION_WGSL;
}

/** The key suffix of a shader that reads a frequency table. */
export function tableKey(table: boolean): string {
  return table ? '/table' : '';
}

/** −2 · log2(theta) / headDim: pair i's frequency is exp2(i · logStep). */
export function ropeLogStep(theta: number, headDim: number): number {
  return (-2 * Math.log2(theta)) / headDim;
}

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
      if (table) module.storage('frequencies', 'f32', 'read');
      module.declare(ropeRotationSource(table));
      return module.build(
        undefined,
        WG,
        `  ${elementIndex('params.pairs')}
  let pair = i % params.half;
  let rest = i / params.half; // s · heads + h
  let position = params.positionOffset${device ? ' + bitcast<u32>(offset[0])' : ''} + rest / params.heads;
  let rotation = ropeRotation(position, pair, params.logStep, params.sign);
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
      if (table) module.storage('frequencies', 'f32', 'read');
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
    let rotation = ropeRotation(position, pair, params.logStep, params.sign);
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
        buffers: [x, outputs[0]!, ...(offset ? [offset] : []), ...(frequencies ? [frequencies] : [])],
        params: {
          layout: PARAMS,
          values: {
            pairs,
            half,
            headDim,
            heads,
            positionOffset: attrs.positionOffset,
            logStep: ropeLogStep(attrs.theta, headDim),
            sign: attrs.inverse ? -1 : 1,
          },
        },
        workgroups: elementGrid(encoder, pairs),
      });
    },
    { dtypes: FLOAT },
  ),
];
