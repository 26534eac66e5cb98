import { type CastDType, cast, FLOAT } from '@rayo/core';
import { type AnyWgpuKernel, type KernelEncoder, type Operand, wgpuKernel } from '../kernel.js';
import { paramLayout } from '../params.js';
import { ShaderModule } from '../wgsl/module.js';
import { elementGrid, elementIndex, WG } from './common.js';

// Conversions are integer code on the bit patterns: f16 needs no `shader-f16`
// (and WGSL's pack2x16float leaves overflow unspecified), bf16 has no WGSL
// type, and no float arithmetic can flush a subnormal or quiet a NaN. Half
// tensors are bound as u32 words of two elements, the lower one first.

const PARAMS = paramLayout([['n', 'u32']] as const);

/** f32 bits from f16 bits, exact (subnormals normalised, NaN kept NaN). */
const F16_TO_F32 = `
fn f16_to_f32(h: u32) -> u32 {
  let sign = (h & 0x8000u) << 16u;
  let e = (h >> 10u) & 0x1fu;
  let m = h & 0x3ffu;
  if (e == 0x1fu) { return sign | 0x7f800000u | (m << 13u); }
  if (e == 0u) {
    if (m == 0u) { return sign; }
    let shift = countLeadingZeros(m) - 21u;
    return sign | ((113u - shift) << 23u) | (((m << shift) & 0x3ffu) << 13u);
  }
  return sign | ((e + 112u) << 23u) | (m << 13u);
}`;

/** f16 bits from f32 bits, round to nearest even; overflow to Inf, NaN to the quiet NaN. */
const F32_TO_F16 = `
fn f32_to_f16(x: u32) -> u32 {
  let sign = (x >> 16u) & 0x8000u;
  let a = x & 0x7fffffffu;
  if (a > 0x7f800000u) { return sign | 0x7e00u; }
  if (a >= 0x477ff000u) { return sign | 0x7c00u; }
  if (a >= 0x38800000u) {
    let b = a - 0x38000000u;
    return sign | ((b + 0xfffu + ((b >> 13u) & 1u)) >> 13u);
  }
  if (a < 0x33000000u) { return sign; }
  let m = (a & 0x7fffffu) | 0x800000u;
  let shift = 126u - (a >> 23u);
  let q = m >> shift;
  let rest = m & ((1u << shift) - 1u);
  let halfway = 1u << (shift - 1u);
  return sign | select(q, q + 1u, rest > halfway || (rest == halfway && (q & 1u) == 1u));
}`;

/** bf16 bits from f32 bits, round to nearest even; NaN to the quiet NaN. */
const F32_TO_BF16 = `
fn f32_to_bf16(x: u32) -> u32 {
  if ((x & 0x7fffffffu) > 0x7f800000u) { return ((x >> 16u) & 0x8000u) | 0x7fc0u; }
  return (x + 0x7fffu + ((x >> 16u) & 1u)) >> 16u;
}`;

/** WGSL of `load(i)`: the f32 bits of element i of x. */
function loader(from: CastDType): string {
  const half = '((x[i >> 1u] >> ((i & 1u) * 16u)) & 0xffffu)';
  const body = from === 'f32' ? 'x[i]' : from === 'f16' ? `f16_to_f32(${half})` : `${half} << 16u`;
  return `fn load(i: u32) -> u32 { return ${body}; }`;
}

function castShader(from: CastDType, to: CastDType) {
  const encode = to === 'f16' ? 'f32_to_f16' : 'f32_to_bf16';
  // A half output: one thread per word; the last word of an odd count keeps its upper half.
  const body =
    to === 'f32'
      ? `  ${elementIndex('params.n')}\n  y[i] = load(i);`
      : `  ${elementIndex('(params.n + 1u) / 2u')}
  let first = 2u * i;
  let lo = ${encode}(load(first));
  let hi = select(y[i] >> 16u, ${encode}(load(first + 1u)), first + 1u < params.n);
  y[i] = lo | (hi << 16u);`;
  return {
    key: `cast/${from}-${to}/wg${WG}`,
    kernel: 'cast',
    code: () => {
      const module = new ShaderModule();
      module.storage('x', 'u32', 'read');
      module.storage('y', 'u32', 'read_write');
      if (from === 'f16') module.declare(F16_TO_F32);
      module.declare(loader(from));
      if (to !== 'f32') module.declare(to === 'f16' ? F32_TO_F16 : F32_TO_BF16);
      return module.build(PARAMS, WG, body);
    },
  };
}

/** Encodes y = x converted to y's dtype (both float operands of y.size elements). */
export function encodeCast(encoder: KernelEncoder, x: Operand, y: Operand): void {
  const to = y.dtype as CastDType;
  const threads = to === 'f32' ? y.size : Math.ceil(y.size / 2);
  encoder.dispatch({
    shader: castShader(x.dtype as CastDType, to),
    buffers: [x, y],
    params: { layout: PARAMS, values: { n: y.size } },
    workgroups: elementGrid(encoder, threads),
  });
}

const castKernel = wgpuKernel(
  cast,
  (encoder, { inputs, outputs }) => {
    encodeCast(encoder, inputs[0]!, outputs[0]!);
  },
  { dtypes: FLOAT },
);

export const CAST_KERNELS: readonly AnyWgpuKernel[] = [castKernel];
