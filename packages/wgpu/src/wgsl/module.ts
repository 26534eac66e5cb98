import { linearWorkgroup } from '../kernel.js';
import { BUILTINS } from '../kernels/common.js';
import type { ParamLayout } from '../params.js';

// A small typed layer over WGSL text: every kernel's declarations are made
// through a `ShaderModule`, so that bindings are numbered in the order the
// dispatch binds its buffers, the parameter struct and its uniform come from
// one `paramLayout`, and `enable f16;` appears exactly when a declaration uses
// f16.

/** Floating-point element types a kernel stores; arithmetic stays in f32. */
export type Scalar = 'f32' | 'f16';
/** Elements per access: scalars or vec4 loads. */
export type Width = 1 | 4;

type Element = Scalar | 'i32' | 'u32';
/** A WGSL type a declaration may hold. */
export type WgslType = Element | `vec${2 | 3 | 4}<${Element}>` | `atomic<${'i32' | 'u32'}>`;

/** WGSL extensions a module may enable (f16 is enabled by the declarations that use it). */
export type WgslExtension = 'f16' | 'subgroups' | 'chromium_experimental_subgroup_matrix';

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
 * One compute shader. Storage bindings get @binding(0), (1), … in the order
 * they are declared and the `Params` uniform the number after them, as
 * `Dispatch` binds them. Where the struct and its uniform appear in the text
 * is the caller's choice: `build(params, …)` puts them first; `params(layout)`
 * puts the struct where it is called and the uniform after the storage
 * bindings, so that the declarations read in binding order.
 */
export class ShaderModule {
  readonly #extensions: WgslExtension[] = [];
  readonly #diagnostics: string[] = [];
  /** Module-scope WGSL declared after `params()` and before the first binding. */
  readonly #head: string[] = [];
  readonly #bindings: string[] = [];
  /** All other module-scope WGSL, after the bindings. */
  readonly #decls: string[] = [];
  #params: ParamLayout<string> | undefined;
  #usesF16 = false;

  #note(type: string): void {
    if (type.includes('f16')) this.#usesF16 = true;
  }

  /** `enable <extension>;`, once, in the order asked (`f16` after the others unless asked for earlier). */
  enable(extension: WgslExtension): this {
    if (!this.#extensions.includes(extension)) this.#extensions.push(extension);
    return this;
  }

  /** `diagnostic(<severity>, <rule>);` after the enables. */
  diagnostic(severity: 'off' | 'info' | 'warning' | 'error', rule: string): this {
    const directive = `diagnostic(${severity}, ${rule});`;
    if (!this.#diagnostics.includes(directive)) this.#diagnostics.push(directive);
    return this;
  }

  /**
   * Declares `struct Params` here and the `params` uniform after the storage
   * bindings (its binding number in any case). A module declares its params
   * either here or through `build`.
   */
  params(layout: ParamLayout<string>): this {
    if (this.#params) throw new Error('ShaderModule: params declared twice');
    this.#params = layout;
    this.#place(layout.wgsl);
    return this;
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
    this.#place(`var<workgroup> ${name}: array<${type}, ${length}>;`);
    return name;
  }

  /** Declares `var<workgroup> name: type`; returns `name`. */
  workgroupVar<N extends string>(name: N, type: WgslType): N {
    this.#note(type);
    this.#place(`var<workgroup> ${name}: ${type};`);
    return name;
  }

  /** Adds module-scope WGSL (functions, constants, aliases, private variables) once per distinct text. */
  declare(wgsl: string): this {
    if (!this.#head.includes(wgsl) && !this.#decls.includes(wgsl)) this.#place(wgsl);
    return this;
  }

  #place(wgsl: string): void {
    (this.#bindings.length === 0 && this.#params ? this.#head : this.#decls).push(wgsl);
  }

  /**
   * The module's text: the directives; with `params`, its struct and uniform;
   * the storage bindings (and the uniform of `params()`), the declarations,
   * then `main` with `body` (indented by the caller), whose parameters are
   * `BUILTINS` and `builtins` (e.g. `@builtin(local_invocation_index) tid: u32`).
   */
  build(
    params: ParamLayout<string> | undefined,
    workgroupSize: string | number,
    body: string,
    builtins?: string,
  ): string {
    if (params && this.#params) throw new Error('ShaderModule: params declared twice');
    const extensions = [...this.#extensions];
    if (this.#usesF16 && !extensions.includes('f16')) extensions.push('f16');
    const uniform = (p: ParamLayout<string> | undefined) =>
      p ? [`@group(0) @binding(${this.#bindings.length}) var<uniform> params: Params;`] : [];
    return [
      ...extensions.map((e) => `enable ${e};`),
      ...this.#diagnostics,
      ...(params ? [params.wgsl, ...uniform(params)] : []),
      ...this.#head,
      ...this.#bindings,
      ...uniform(this.#params),
      ...this.#decls,
      `@compute @workgroup_size(${workgroupSize})`,
      `fn main(${BUILTINS}${builtins ? `, ${builtins}` : ''}) {`,
      body,
      '}',
      '',
    ].join('\n');
  }
}
