import { bytesPerElement, clipByGlobalNorm, FLOAT, globalNorm, isHalf } from '@rayo/core';
import { gridFor, type KernelEncoder, linearWorkgroup, type Operand, wgpuKernel } from '../kernel.js';
import { paramLayout } from '../params.js';
import type { ShaderSource } from '../pipelines.js';
import {
  bindingType,
  declareHalf,
  halfFunctions,
  loadScalar,
  quadType,
  type Storage,
  storageOf,
  unpack2,
  unpackQuad,
} from '../wgsl/half.js';
import { ShaderModule } from '../wgsl/module.js';
import { elementGrid, elementIndex, WG } from './common.js';
import { dispatchUpdate, type UpdateDecl, updateLayout } from './inPlaceUpdate.js';

// Three kinds of passes, all on the device: per gradient, a fixed number of
// workgroups write partial sums of squares into scratch; one workgroup sums
// the partials in a fixed order, writes the norm and puts the clip scale after
// the partials; per gradient, a scaling pass reads the scale from there.

/** Elements per workgroup before a gradient gets another one. */
const SUMSQ_ELEMENTS = 8 * WG * 4;
/** Most workgroups per gradient: enough to fill a GPU, few partials to sum. */
const SUMSQ_MAX_WORKGROUPS = 1024;

const SUMSQ_PARAMS = paramLayout([
  ['n', 'u32'],
  ['vecs', 'u32'],
  ['threads', 'u32'],
  ['base', 'u32'],
] as const);

const NORM_PARAMS = paramLayout([
  ['count', 'u32'],
  ['maxNorm', 'f32'],
  ['eps', 'f32'],
] as const);

const SCALE_LAYOUT = updateLayout([['at', 'u32']] as const);

/** Tree sum of `red[0..WG)` into `red[0]`. */
const TREE_SUM = `
  for (var s = ${WG / 2}u; s > 0u; s = s >> 1u) {
    workgroupBarrier();
    if (tid < s) { red[tid] += red[tid + s]; }
  }`;

/** `x`: how the tensor is stored; halves are read in u32 words (4 per vec2<u32>). */
function sumsqShader(kernel: string, vec: boolean, x: Storage = 'f32'): ShaderSource {
  const x4 = (i: string) => unpackQuad(x, `x4[${i}]`);
  const xs = (i: string) => loadScalar(x, 'xs', i);
  return {
    key: `optimizer/${kernel}/sumsq/${vec ? 'vec4' : 'scalar'}${x === 'f32' ? '' : `/${x}`}/wg${WG}`,
    kernel,
    code: () => {
      const module = new ShaderModule().params(SUMSQ_PARAMS);
      module.storage('xs', bindingType(x, false), 'read');
      module.storage('partials', 'f32', 'read_write');
      if (vec) module.storage('x4', quadType(x), 'read');
      module.workgroupArray('red', 'f32', WG);
      module.declare(halfFunctions(x));
      return module.build(
        undefined,
        WG,
        `  let tid = lid.x;
  let w = ${linearWorkgroup};
  let stride = params.threads;
  var i = w * ${WG}u + tid;
  var total = 0.0;
${
  vec
    ? `  // Four independent loads per step keep memory busy.
  var a0 = vec4<f32>(); var a1 = vec4<f32>(); var a2 = vec4<f32>(); var a3 = vec4<f32>();
  for (; i + 3u * stride < params.vecs; i += 4u * stride) {
    let x0 = ${x4('i')}; let x1 = ${x4('i + stride')}; let x2 = ${x4('i + 2u * stride')}; let x3 = ${x4('i + 3u * stride')};
    a0 += x0 * x0; a1 += x1 * x1; a2 += x2 * x2; a3 += x3 * x3;
  }
  for (; i < params.vecs; i += stride) { let x = ${x4('i')}; a0 += x * x; }
  let a = (a0 + a1) + (a2 + a3);
  total = (a.x + a.y) + (a.z + a.w);
  // The last n mod 4 elements.
  let tail = params.vecs * 4u + tid;
  if (w == 0u && tail < params.n) { let x = ${xs('tail')}; total += x * x; }`
    : `  for (; i < params.n; i += stride) { let x = ${xs('i')}; total += x * x; }`
}
  red[tid] = total;
${TREE_SUM}
  if (tid == 0u) { partials[params.base + w] = red[0]; }`,
      );
    },
  };
}

/** One workgroup: the norm from the partials; with `withScale` also the clip scale after the partials. */
const normShader = (kernel: string, withScale: boolean): ShaderSource => ({
  key: `optimizer/${kernel}/norm${withScale ? '-scale' : ''}/wg${WG}`,
  kernel,
  code: () => {
    const module = new ShaderModule().params(NORM_PARAMS);
    module.storage('partials', 'f32', 'read_write');
    module.storage('norm', 'f32', 'read_write');
    module.workgroupArray('red', 'f32', WG);
    return module.build(
      undefined,
      WG,
      `  let tid = lid.x;
  var total = 0.0;
  for (var i = tid; i < params.count; i += ${WG}u) { total += partials[i]; }
  red[tid] = total;
${TREE_SUM}
  if (tid == 0u) {
    let n = sqrt(red[0]);
    norm[0] = n;${
      withScale
        ? `
    // min(1, maxNorm / (norm + eps)), without dividing by a zero norm + eps.
    let denom = n + params.eps;
    partials[params.count] = select(1.0, params.maxNorm / denom, denom > params.maxNorm);`
        : ''
    }
  }`,
    );
  },
});

const SCALE: UpdateDecl = {
  name: 'clipByGlobalNorm/scale',
  kernel: 'clipByGlobalNorm',
  operands: [['x', 'read_write']],
  extra: ['clip'],
  layout: SCALE_LAYOUT,
  // Unclipped gradients stay as they are: no traffic, and few workgroups to start and end at once.
  prologue: 'let s = clip[params.at];\n  if (s == 1.0) { return; }',
  maxWorkgroups: 16384,
  body: 'x_out = x * s;',
};

/**
 * The sum-of-squares passes over `grads` and the norm pass into `norm`; the
 * partials live in scratch with one more word after them for the clip scale.
 * Returns that scratch and the number of partials.
 */
function encodeNorm(
  encoder: KernelEncoder,
  kernel: string,
  grads: readonly Operand[],
  norm: Operand,
  clip?: { maxNorm: number; eps: number },
): { partials: GPUBufferBinding; count: number } {
  const counts = grads.map((g) =>
    g.size === 0 ? 0 : Math.min(SUMSQ_MAX_WORKGROUPS, Math.ceil(g.size / SUMSQ_ELEMENTS)),
  );
  const count = counts.reduce((a, b) => a + b, 0);
  const bytes = (count + 1) * 4;
  const partials = { buffer: encoder.scratch(bytes), offset: 0, size: bytes };
  let base = 0;
  grads.forEach((g, j) => {
    const workgroups = counts[j]!;
    if (workgroups === 0) return;
    const vecs = Math.floor(g.size / 4);
    const vec = vecs > 0;
    encoder.dispatch({
      shader: sumsqShader(kernel, vec, storageOf(g.dtype)),
      buffers: vec
        ? [g, partials, { buffer: g.buffer, offset: g.offset, size: vecs * 4 * bytesPerElement(g.dtype) }]
        : [g, partials],
      params: { layout: SUMSQ_PARAMS, values: { n: g.size, vecs, threads: workgroups * WG, base } },
      workgroups: gridFor(workgroups, encoder.limits),
    });
    base += workgroups;
  });
  encoder.dispatch({
    shader: normShader(kernel, clip !== undefined),
    buffers: [partials, norm],
    params: { layout: NORM_PARAMS, values: { count, maxNorm: clip?.maxNorm ?? 0, eps: clip?.eps ?? 0 } },
    workgroups: [1],
  });
  return { partials, count };
}

const HALF_SCALE_PARAMS = paramLayout([
  ['n', 'u32'],
  ['at', 'u32'],
] as const);

/** The clip scale of a half gradient in place: one u32 word (two halves) per invocation, each rounded once. */
function halfScaleShader(dtype: 'f16' | 'bf16'): ShaderSource {
  return {
    key: `optimizer/clipByGlobalNorm/scale/${dtype}/wg${WG}`,
    kernel: 'clipByGlobalNorm',
    code: () => {
      const module = new ShaderModule();
      module.storage('x', 'u32', 'read_write');
      module.storage('clip', 'f32', 'read');
      declareHalf(module, dtype);
      return module.build(
        HALF_SCALE_PARAMS,
        WG,
        `  ${elementIndex('(params.n + 1u) / 2u')}
  let s = clip[params.at];
  if (s == 1.0) { return; }
  let w = x[i];
  let v = ${unpack2(dtype, 'w')} * s;
  let hi = select(w >> 16u, to_${dtype}(v.y), 2u * i + 1u < params.n);
  x[i] = to_${dtype}(v.x) | (hi << 16u);`,
      );
    },
  };
}

export const clipKernel = wgpuKernel(
  clipByGlobalNorm,
  (encoder, { inputs, outputs, attrs }) => {
    const grads = inputs.map((g) => g!);
    const norm = outputs[outputs.length - 1]!;
    const { partials, count } = encodeNorm(encoder, 'clipByGlobalNorm', grads, norm, attrs);
    for (const g of grads) {
      if (!isHalf(g.dtype)) {
        dispatchUpdate(encoder, SCALE, [g], [partials], { at: count });
      } else if (g.size > 0) {
        encoder.dispatch({
          shader: halfScaleShader(g.dtype),
          buffers: [g, partials],
          params: { layout: HALF_SCALE_PARAMS, values: { n: g.size, at: count } },
          workgroups: elementGrid(encoder, Math.ceil(g.size / 2)),
        });
      }
    }
  },
  { dtypes: FLOAT },
);

export const globalNormKernel = wgpuKernel(
  globalNorm,
  (encoder, { inputs, outputs }) => {
    encodeNorm(
      encoder,
      'globalNorm',
      inputs.map((x) => x!),
      outputs[0]!,
    );
  },
  { dtypes: FLOAT },
);
