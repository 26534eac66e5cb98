import { type CastDType, cast, FLOAT } from '@rayo/core';
import { type AnyWgpuKernel, type KernelEncoder, type Operand, wgpuKernel } from '../kernel.js';
import { paramLayout } from '../params.js';
import { F16_TO_F32, F32_TO_BF16, F32_TO_F16 } from '../wgsl/half.js';
import { ShaderModule } from '../wgsl/module.js';
import { elementGrid, elementIndex, WG } from './common.js';

// Conversions are integer code on the bit patterns: f16 needs no `shader-f16`
// (and WGSL's pack2x16float leaves overflow unspecified), bf16 has no WGSL
// type, and no float arithmetic can flush a subnormal or quiet a NaN. Half
// tensors are bound as u32 words of two elements, the lower one first.

const PARAMS = paramLayout([['n', 'u32']] as const);

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

const PADDED_PARAMS = paramLayout([
  ['words', 'u32'],
  ['cols', 'u32'],
  ['ld', 'u32'],
] as const);

/** f32 rows of `cols` into f16 rows of `ld` halves (ld even), zeros past `cols`. */
const paddedRowsShader = {
  key: `cast/f32-f16-padded/wg${WG}`,
  kernel: 'cast',
  code: () => {
    const module = new ShaderModule();
    module.storage('x', 'u32', 'read');
    module.storage('y', 'u32', 'read_write');
    module.declare(F32_TO_F16);
    return module.build(
      PADDED_PARAMS,
      WG,
      `  ${elementIndex('params.words')}
  let half = params.ld / 2u;
  let row = i / half;
  let col = (i % half) * 2u;
  let at = row * params.cols + col;
  let lo = select(0u, f32_to_f16(x[at]), col < params.cols);
  let hi = select(0u, f32_to_f16(x[at + 1u]), col + 1u < params.cols);
  y[i] = lo | (hi << 16u);`,
    );
  },
};

/**
 * Encodes y = x (f32, rows of `cols`) rounded to f16 in rows of `ld` halves,
 * the padding zero: rows a multiple of 8 halves long start on 16 bytes,
 * where the f16 product loads 8 halves at a time.
 */
export function encodeCastPaddedRows(
  encoder: KernelEncoder,
  x: Operand,
  y: Operand,
  cols: number,
  ld: number,
): void {
  if (x.dtype !== 'f32' || y.dtype !== 'f16' || ld % 2 !== 0 || ld < cols || x.size % cols !== 0)
    throw new Error(`padded cast: f32 rows of ${cols} into f16 rows of ${ld}, got ${x.dtype} → ${y.dtype}`);
  const words = (x.size / cols) * (ld / 2);
  encoder.dispatch({
    shader: paddedRowsShader,
    buffers: [x, y],
    params: { layout: PADDED_PARAMS, values: { words, cols, ld } },
    workgroups: elementGrid(encoder, words),
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
