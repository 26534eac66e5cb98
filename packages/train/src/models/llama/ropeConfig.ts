import { InvalidArgumentError, type RopeScaling } from '@rayo/core';

// RoPE's base and scaling from a config.json, in either form: transformers
// 4's `rope_theta` and `rope_scaling` (its type under `type` or `rope_type`),
// or transformers 5's `rope_parameters`, which holds both.

function invalid(field: string, expected: string, actual: unknown): never {
  throw new InvalidArgumentError(`config field '${field}' is invalid`, {
    operation: 'llamaConfig',
    argument: field,
    expected,
    actual: actual === undefined ? 'absent' : JSON.stringify(actual),
  });
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function number(
  spec: Record<string, unknown>,
  where: string,
  key: string,
  check: (v: number) => boolean,
  expected: string,
): number {
  const value = spec[key];
  if (typeof value !== 'number' || !Number.isFinite(value) || !check(value))
    invalid(`${where}.${key}`, expected, value);
  return value;
}

const SUPPORTED = "'default', 'linear' or 'llama3'";

/** The scaling a `rope_scaling` or `rope_parameters` object declares (undefined for 'default'). */
function scalingOf(spec: Record<string, unknown>, where: string): RopeScaling | undefined {
  const { rope_type: ropeType, type } = spec;
  if (ropeType !== undefined && type !== undefined && ropeType !== type)
    invalid(`${where}.type`, `the value of ${where}.rope_type (${JSON.stringify(ropeType)})`, type);
  const kind = ropeType ?? type ?? 'default';
  const partial = spec.partial_rotary_factor;
  if (partial !== undefined && partial !== null && partial !== 1)
    invalid(`${where}.partial_rotary_factor`, '1 or absent (partial RoPE is not implemented)', partial);
  const factor = () => number(spec, where, 'factor', (v) => v >= 1, 'a number >= 1');
  switch (kind) {
    case 'default':
      return undefined;
    case 'linear':
      return { type: 'linear', factor: factor() };
    case 'llama3': {
      const f = factor();
      const lowFreqFactor = number(spec, where, 'low_freq_factor', (v) => v > 0, 'a number > 0');
      const highFreqFactor = number(
        spec,
        where,
        'high_freq_factor',
        (v) => v > lowFreqFactor,
        `a number > low_freq_factor (${lowFreqFactor})`,
      );
      const originalMaxPositionEmbeddings = number(
        spec,
        where,
        'original_max_position_embeddings',
        (v) => v > 0,
        'a number > 0',
      );
      return { type: 'llama3', factor: f, lowFreqFactor, highFreqFactor, originalMaxPositionEmbeddings };
    }
    default:
      return invalid(
        `${where}.${ropeType !== undefined ? 'rope_type' : 'type'}`,
        `${SUPPORTED} (dynamic NTK, YaRN and LongRoPE scale the frequencies with the length or the attention: not implemented)`,
        kind,
      );
  }
}

function sameScaling(a: RopeScaling | undefined, b: RopeScaling | undefined): boolean {
  return JSON.stringify(a) === JSON.stringify(b);
}

/** RoPE's base: at least 1, as the rope kernels take it (a base below 1 would make frequencies above 1). */
function theta(value: unknown, field: string): number {
  if (typeof value !== 'number' || !Number.isFinite(value) || value < 1)
    invalid(field, 'a finite number >= 1', value);
  return value;
}

/**
 * RoPE's base and scaling. `rope_parameters` (transformers 5) wins where it
 * is given; a `rope_theta` or `rope_scaling` beside it must say the same, or
 * the config is refused naming the one that differs. The base is at least 1.
 */
export function parseRope(c: Readonly<Record<string, unknown>>): {
  ropeTheta: number;
  ropeScaling?: RopeScaling;
} {
  const legacyScaling = c.rope_scaling;
  if (legacyScaling !== undefined && legacyScaling !== null && !isObject(legacyScaling))
    invalid('rope_scaling', 'an object or null', legacyScaling);
  const legacy = isObject(legacyScaling) ? scalingOf(legacyScaling, 'rope_scaling') : undefined;
  if (
    c.partial_rotary_factor !== undefined &&
    c.partial_rotary_factor !== null &&
    c.partial_rotary_factor !== 1
  )
    invalid(
      'partial_rotary_factor',
      '1 or absent (partial RoPE is not implemented)',
      c.partial_rotary_factor,
    );
  const parameters = c.rope_parameters;
  let ropeTheta: number;
  let ropeScaling: RopeScaling | undefined;
  if (parameters === undefined || parameters === null) {
    ropeTheta = theta(c.rope_theta ?? 10000, 'rope_theta');
    ropeScaling = legacy;
  } else {
    if (!isObject(parameters)) invalid('rope_parameters', 'an object', parameters);
    if (Object.values(parameters).some(isObject))
      invalid(
        'rope_parameters',
        'one set of RoPE parameters for every layer (per layer type is not implemented)',
        parameters,
      );
    ropeTheta = theta(parameters.rope_theta ?? c.rope_theta ?? 10000, 'rope_parameters.rope_theta');
    if (c.rope_theta !== undefined && c.rope_theta !== null && c.rope_theta !== ropeTheta)
      invalid('rope_theta', `absent, or rope_parameters.rope_theta (${ropeTheta})`, c.rope_theta);
    ropeScaling = scalingOf(parameters, 'rope_parameters');
    if (isObject(legacyScaling) && !sameScaling(legacy, ropeScaling))
      invalid('rope_scaling', 'null, absent, or the scaling of rope_parameters', legacyScaling);
  }
  return ropeScaling ? { ropeTheta, ropeScaling } : { ropeTheta };
}
