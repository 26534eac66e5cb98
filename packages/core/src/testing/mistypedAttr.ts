import type { AttrValues } from '../kernel.js';
import type { InputSample, InvalidRow } from './cases.js';

/**
 * The invalid call giving attribute `attr` a value of the wrong kind
 * (`value`, outside the attribute's type), which its declaration must refuse.
 */
export function mistypedAttr<A extends AttrValues>(
  label: string,
  inputs: readonly (InputSample | undefined)[],
  attr: keyof A & string,
  value: unknown,
): InvalidRow<A> {
  return [label, inputs, 'argument', `attrs.${attr}`, { [attr]: value } as Partial<A>];
}
