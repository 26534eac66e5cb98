import type { KernelBuilder } from '../ptx/kernel.js';
import type { ParamHandles } from '../ptx/module.js';
import type { Param, R64, RegOf } from '../ptx/operands.js';
import type { EntryParamType, ParamScalar, ParamType } from '../ptx/types.js';

/** A parameter as a kernel reads it: a pointer as a global address, any other scalar in its register. */
export type LoadedParam<T extends EntryParamType> = T extends 'ptr'
  ? R64
  : T extends ParamType
    ? RegOf<ParamScalar<T>>
    : never;

/**
 * The named parameters of an entry, loaded one after another in the order
 * named (that order fixes the registers they take): pointers with
 * `globalPointer`, the other scalars with `ldParam`.
 */
export function loadParams<P extends Record<string, EntryParamType>, N extends keyof P & string>(
  k: KernelBuilder,
  p: ParamHandles<P>,
  ...names: readonly N[]
): { readonly [K in N]: LoadedParam<P[K]> } {
  const loaded: Record<string, unknown> = {};
  for (const name of names) {
    const param = p[name] as Param;
    loaded[name] =
      param.type === 'ptr' ? k.globalPointer(param as Param<'ptr'>) : k.ldParam(param as Param<ParamType>);
  }
  return loaded as { readonly [K in N]: LoadedParam<P[K]> };
}

/** Every parameter of an entry, loaded as `loadParams` does in the order they are declared. */
export function loadAllParams<P extends Record<string, EntryParamType>>(
  k: KernelBuilder,
  p: ParamHandles<P>,
): { readonly [K in keyof P & string]: LoadedParam<P[K]> } {
  return loadParams(k, p, ...(Object.keys(p) as (keyof P & string)[]));
}
