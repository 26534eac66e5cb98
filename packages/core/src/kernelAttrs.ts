import { describeValue } from './describeValue.js';
import { InvalidArgumentError, ShapeError } from './errors.js';
import type { AnyKernelSpec, AttrDecl, AttrValue, AttrValues, InputMetas, KernelSpec } from './kernel.js';
import { formatShape } from './shape.js';

/**
 * Applies defaults and checks each attribute against its declaration. An
 * attribute whose device tensor is among `inputs` must not be given and
 * resolves to 0.
 */
export function resolveAttrs<A extends AttrValues>(
  spec: KernelSpec<A>,
  given: Partial<A> | undefined,
  inputs: InputMetas = [],
): A {
  const kernel = spec.name;
  const decls = spec.attributes as Record<string, AttrDecl>;
  const values: Record<string, AttrValue> = {};
  const onDevice = deviceAttributes(spec, inputs, given);
  for (const key of Object.keys(given ?? {})) {
    if (!(key in decls)) {
      const known = Object.keys(decls);
      throw new InvalidArgumentError(spec.refusedAttributes?.[key] ?? 'unknown attribute', {
        operation: kernel,
        argument: `attrs.${key}`,
        expected: known.length ? `one of ${known.join(', ')}` : 'no attributes',
        actual: key,
      });
    }
  }
  for (const [key, decl] of Object.entries(decls)) {
    if (onDevice.has(key)) {
      values[key] = 0;
      continue;
    }
    const value = (given as Record<string, unknown> | undefined)?.[key] ?? decl.default;
    const argument = `attrs.${key}`;
    if (value === undefined) {
      throw new InvalidArgumentError('required attribute is missing', {
        operation: kernel,
        argument,
        expected:
          decl.kind === 'enum'
            ? decl.values.join(' | ')
            : decl.kind === 'numbers'
              ? 'a list of numbers'
              : `a ${decl.kind}`,
        actual: 'nothing',
      });
    }
    if (decl.kind === 'number') {
      if (typeof value !== 'number' || Number.isNaN(value)) {
        throw new InvalidArgumentError('attribute must be a number', {
          operation: kernel,
          argument,
          expected: decl.integer ? 'an integer' : 'a number',
          actual: describeValue(value),
        });
      }
      if (decl.integer && !Number.isInteger(value)) {
        throw new InvalidArgumentError('attribute must be an integer', {
          operation: kernel,
          argument,
          expected: 'an integer',
          actual: String(value),
        });
      }
      const bounds = [
        decl.finite && !Number.isFinite(value) ? 'a finite number' : undefined,
        decl.min !== undefined && value < decl.min ? `>= ${decl.min}` : undefined,
        decl.max !== undefined && value > decl.max ? `<= ${decl.max}` : undefined,
        decl.above !== undefined && value <= decl.above ? `> ${decl.above}` : undefined,
      ].find((b) => b !== undefined);
      if (bounds) {
        throw new InvalidArgumentError('attribute out of range', {
          operation: kernel,
          argument,
          expected: bounds,
          actual: String(value),
        });
      }
    } else if (decl.kind === 'numbers') {
      values[key] = checkNumberList(kernel, argument, decl, value);
      continue;
    } else if (decl.kind === 'boolean') {
      if (typeof value !== 'boolean') {
        throw new InvalidArgumentError('attribute must be a boolean', {
          operation: kernel,
          argument,
          expected: 'true or false',
          actual: describeValue(value),
        });
      }
    } else if (typeof value !== 'string' || !decl.values.includes(value)) {
      throw new InvalidArgumentError('attribute must be one of its values', {
        operation: kernel,
        argument,
        expected: decl.values.map((v) => JSON.stringify(v)).join(' | '),
        actual: describeValue(value),
      });
    }
    values[key] = value as AttrValue;
  }
  return values as unknown as A;
}

/** A copy of a `numbers` attribute after checking every element; frozen, so a recorded call keeps its values. */
function checkNumberList(
  kernel: string,
  argument: string,
  decl: Extract<AttrDecl, { kind: 'numbers' }>,
  value: unknown,
): readonly number[] {
  if (!Array.isArray(value) || value.length === 0) {
    throw new InvalidArgumentError('attribute must be a non-empty list of numbers', {
      operation: kernel,
      argument,
      expected: 'an array of numbers',
      actual: Array.isArray(value) ? 'an empty array' : describeValue(value),
    });
  }
  value.forEach((x: unknown, i) => {
    const bound =
      typeof x !== 'number' || Number.isNaN(x)
        ? 'a number'
        : decl.min !== undefined && x < decl.min
          ? `>= ${decl.min}`
          : decl.max !== undefined && x > decl.max
            ? `<= ${decl.max}`
            : undefined;
    if (bound) {
      throw new InvalidArgumentError('attribute element out of range', {
        operation: kernel,
        argument: `${argument}[${i}]`,
        expected: bound,
        actual: describeValue(x),
      });
    }
  });
  return Object.freeze([...(value as number[])]);
}

/**
 * The attributes whose value a given input holds on the device; checks that
 * such an input is one element of shape [1] and that its attribute is not
 * also given.
 */
function deviceAttributes(
  spec: AnyKernelSpec,
  inputs: InputMetas,
  given: Partial<AttrValues> | undefined,
): Set<string> {
  const keys = new Set<string>();
  spec.inputs.forEach((decl, i) => {
    const meta = inputs[i];
    if (decl.attribute === undefined || !meta) return;
    if (meta.shape.length !== 1 || meta.shape[0] !== 1) {
      throw new ShapeError('a device value must be a tensor of one element', {
        operation: spec.name,
        argument: decl.name,
        expected: '[1]',
        actual: formatShape(meta.shape),
      });
    }
    const value = (given as Record<string, unknown> | undefined)?.[decl.attribute];
    if (value !== undefined) {
      throw new InvalidArgumentError(
        `give either attrs.${decl.attribute} or input '${decl.name}', not both`,
        {
          operation: spec.name,
          argument: `attrs.${decl.attribute}`,
          expected: `nothing (input '${decl.name}' holds it on the device)`,
          actual: describeValue(value),
        },
      );
    }
    keys.add(decl.attribute);
  });
  return keys;
}
