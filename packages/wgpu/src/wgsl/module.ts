import { linearWorkgroup } from '../kernel.js';
import { BUILTINS } from '../kernels/common.js';
import type { ParamLayout } from '../params.js';

// A small typed layer over WGSL text: declarations are made through these
// helpers so that bindings are numbered in the order the dispatch binds its
// buffers, the parameter struct and its uniform come from one `paramLayout`,
// and `enable f16;` appears exactly when a declaration uses f16.

/** Floating-point element types a kernel stores; arithmetic stays in f32. */
export type Scalar = 'f32' | 'f16';
/** Elements per access: scalars or vec4 loads. */
export type Width = 1 | 4;

type Element = Scalar | 'i32' | 'u32';
/** A WGSL type a declaration may hold. */
export type WgslType = Element | `vec${2 | 3 | 4}<${Element}>`;

/** WGSL type of `width` elements of `scalar`. */
export function vectorOf<S extends Element>(scalar: S, width: Width): S | `vec4<${S}>` {
  return width === 4 ? `vec4<${scalar}>` : scalar;
}

/** WGSL: a literal of `scalar`, suffixed so it has that type (`1.5f`, `1.5h`). */
export function literal(scalar: Scalar, value: number): string {
  if (!Number.isFinite(value)) throw new RangeError(`WGSL has no literal for ${value}`);
  const text = Number.isInteger(value) ? value.toFixed(1) : String(value);
  return `${text}${scalar === 'f16' ? 'h' : 'f'}`;
}

/** WGSL: a loaded value of `scalar` as f32, the type every reduction accumulates in. */
export function widen(scalar: Scalar, width: Width, value: string): string {
  return scalar === 'f32' ? value : `${vectorOf('f32', width)}(${value})`;
}

/** WGSL: an f32 result as `scalar`, for storing. */
export function narrow(scalar: Scalar, width: Width, value: string): string {
  return scalar === 'f32' ? value : `${vectorOf(scalar, width)}(${value})`;
}

export { linearWorkgroup };

/**
 * One compute shader: storage bindings get @binding(0), (1), … in the order
 * they are declared, and the `Params` uniform comes after them, as `Dispatch`
 * binds them.
 */
export class ShaderModule {
  readonly #bindings: string[] = [];
  readonly #decls: string[] = [];
  #usesF16 = false;

  #note(type: string): void {
    if (type.includes('f16')) this.#usesF16 = true;
  }

  /** Declares the next storage binding `name: array<type>`; returns `name`. */
  storage<N extends string>(name: N, type: WgslType, access: 'read' | 'read_write'): N {
    this.#note(type);
    this.#bindings.push(
      `@group(0) @binding(${this.#bindings.length}) var<storage, ${access}> ${name}: array<${type}>;`,
    );
    return name;
  }

  /** Declares `var<workgroup> name: array<type, length>`; returns `name`. */
  workgroupArray<N extends string>(name: N, type: WgslType, length: number): N {
    this.#note(type);
    this.#decls.push(`var<workgroup> ${name}: array<${type}, ${length}>;`);
    return name;
  }

  /** Adds module-scope WGSL (functions, private variables) once per distinct text. */
  declare(wgsl: string): this {
    if (!this.#decls.includes(wgsl)) this.#decls.push(wgsl);
    return this;
  }

  /**
   * The module's text: the parameter struct and its uniform after the storage
   * bindings, the declarations, then `main` with `body`.
   */
  build(params: ParamLayout<string> | undefined, workgroupSize: string | number, body: string): string {
    const uniform = params
      ? [params.wgsl, `@group(0) @binding(${this.#bindings.length}) var<uniform> params: Params;`]
      : [];
    return [
      ...(this.#usesF16 ? ['enable f16;'] : []),
      ...uniform,
      ...this.#bindings,
      ...this.#decls,
      `@compute @workgroup_size(${workgroupSize})`,
      `fn main(${BUILTINS}) {`,
      body,
      '}',
      '',
    ].join('\n');
  }
}
