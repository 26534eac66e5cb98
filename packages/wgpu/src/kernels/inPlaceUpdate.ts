// The in-place elementwise updates the optimizer kernels are declared as
// (adamwStep, sgdStep, the clip scale): a WGSL body over `let` operands,
// dispatched as vec4 over the aligned part and scalars over the tail.
import { bytesPerElement } from '@rayo/core';
import { gridFor, type KernelEncoder, linearWorkgroup, type Operand } from '../kernel.js';
import { type ParamLayout, paramLayout } from '../params.js';
import type { ShaderSource } from '../pipelines.js';
import {
  bindingType,
  halfFunctions,
  loadScalar,
  quadType,
  type Storage,
  storageOf,
  unpackQuad,
} from '../wgsl/half.js';
import { ShaderModule } from '../wgsl/module.js';
import { elementGrid, WG } from './common.js';

/** Threads of a grid of `WG`-thread workgroups. */
function threadsOf(grid: readonly number[]): number {
  return grid.reduce((a, b) => a * b, 1) * WG;
}

export interface UpdateDecl {
  /** Key prefix and kernel name. */
  readonly name: string;
  readonly kernel: string;
  /** Operand binding names in call order, with whether the update writes them. */
  readonly operands: readonly (readonly [string, 'read' | 'read_write'])[];
  /** Extra read-only bindings after the operands (e.g. a scale computed on the device): a name (f32) or [name, element type]. */
  readonly extra?: readonly (string | readonly [string, 'f32' | 'i32'])[];
  /** WGSL functions the prologue or body call. */
  readonly helpers?: string;
  /** WGSL statements run before any operand is touched; may `return` early. */
  readonly prologue?: string;
  /** WGSL statements on `let` values named after the operands, assigning `<name>_out` for written ones; T is f32 or vec4<f32>. */
  readonly body: string;
  /**
   * Caps the workgroups; threads then loop over the elements. Unset: one
   * vector per thread, which streams fastest.
   */
  readonly maxWorkgroups?: number;
  /** Uniform fields after `n`, `base` and `stride`. */
  readonly layout: ParamLayout<string>;
}

/** The uniform layout of an update: `n`, `base` and `stride` first, then the kernel's fields. */
export function updateLayout<const F extends readonly (readonly [string, 'u32' | 'f32'])[]>(fields: F) {
  return paramLayout([['n', 'u32'], ['base', 'u32'], ['stride', 'u32'], ...fields] as const);
}

/** `grad` may be half (u32 words): widened as it is read, 4 halves per vec2<u32> load. */
function updateShader(decl: UpdateDecl, vec: boolean, grad: Storage = 'f32'): ShaderSource {
  const type = vec ? 'vec4<f32>' : 'f32';
  const bindingOf = (name: string) =>
    name !== 'grad' ? type : vec ? quadType(grad) : bindingType(grad, false);
  const load = (name: string) =>
    name !== 'grad'
      ? `${name}_buf[i]`
      : vec
        ? unpackQuad(grad, `${name}_buf[i]`)
        : loadScalar(grad, `${name}_buf`, 'i');
  const ops = decl.operands;
  const written = ops.filter(([, access]) => access === 'read_write').map(([name]) => name);
  const extra = decl.extra ?? [];
  return {
    key: `optimizer/${decl.name}/${vec ? 'vec4' : 'scalar'}${grad === 'f32' ? '' : `/grad-${grad}`}/wg${WG}`,
    kernel: decl.kernel,
    code: () => {
      const module = new ShaderModule().params(decl.layout);
      module.declare(`alias T = ${type};`);
      for (const [name, access] of ops) module.storage(`${name}_buf`, bindingOf(name), access);
      for (const e of extra) {
        const [name, type] = typeof e === 'string' ? [e, 'f32' as const] : e;
        module.storage(name, type, 'read');
      }
      module.declare(decl.helpers ?? '');
      module.declare(halfFunctions(grad));
      return module.build(
        undefined,
        WG,
        `  ${decl.prologue ?? ''}
  for (var i = params.base + (${linearWorkgroup}) * ${WG}u + lid.x; i < params.n; i += params.stride) {
${ops.map(([name]) => `    let ${name} = ${load(name)};`).join('\n')}
${written.map((name) => `    var ${name}_out: T;`).join('\n')}
    ${decl.body}
${written.map((name) => `    ${name}_buf[i] = ${name}_out;`).join('\n')}
  }`,
      );
    },
  };
}

/**
 * Runs an update over `n` elements of equally long operands: vec4 over the
 * first ⌊n/4⌋ vectors, then scalars over the last n mod 4 elements, bound from
 * the last aligned offset before them (one writable buffer cannot be bound
 * twice, as vec4 and as f32).
 */
export function dispatchUpdate(
  encoder: KernelEncoder,
  decl: UpdateDecl,
  operands: readonly Operand[],
  extra: readonly (Operand | GPUBufferBinding)[],
  values: Readonly<Record<string, number>>,
): void {
  const n = operands[0]!.size;
  if (n === 0) return;
  const gradAt = decl.operands.findIndex(([name]) => name === 'grad');
  const grad = gradAt < 0 ? 'f32' : storageOf(operands[gradAt]!.dtype);
  const vecs = Math.floor(n / 4);
  if (vecs > 0) {
    const grid = decl.maxWorkgroups
      ? gridFor(Math.min(decl.maxWorkgroups, Math.ceil(vecs / WG)), encoder.limits)
      : elementGrid(encoder, vecs);
    encoder.dispatch({
      shader: updateShader(decl, true, grad),
      buffers: [...operands, ...extra],
      params: { layout: decl.layout, values: { ...values, n: vecs, base: 0, stride: threadsOf(grid) } },
      workgroups: grid,
    });
  }
  const done = vecs * 4;
  if (done === n) return;
  // Elements from an offset every operand's binding accepts (2-byte halves need twice as many).
  const align = encoder.limits.minStorageBufferOffsetAlignment / (grad === 'f32' ? 4 : 2);
  const from = Math.floor(done / align) * align;
  encoder.dispatch({
    shader: updateShader(decl, false, grad),
    buffers: [
      ...operands.map((op) => {
        const bytes = bytesPerElement(op.dtype);
        return {
          buffer: op.buffer,
          offset: op.offset + from * bytes,
          size: Math.ceil(((n - from) * bytes) / 4) * 4,
        };
      }),
      ...extra,
    ],
    params: { layout: decl.layout, values: { ...values, n: n - from, base: done - from, stride: WG } },
    workgroups: [1],
  });
}

/** e^x − 1 for x ≤ 0: the series (8 terms, error below 1e-10 relative) where |x| < 1/4, else exp. */
export const EXPM1 = `
fn expm1(x: f32) -> f32 {
  let series = x * (1.0 + x * (1.0 / 2.0 + x * (1.0 / 6.0 + x * (1.0 / 24.0 + x * (1.0 / 120.0
    + x * (1.0 / 720.0 + x * (1.0 / 5040.0 + x * (1.0 / 40320.0))))))));
  return select(exp(x) - 1.0, series, abs(x) < 0.25);
}`;
