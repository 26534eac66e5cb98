import { InvalidArgumentError } from '@rayo/core';

/**
 * Builder misuse is a programming error in a kernel family; the message names
 * the builder call (as the error's `kernel`), the argument and what was
 * expected against what was given, so the faulty call is found from the text.
 */
export function misuse(
  call: string,
  message: string,
  details: { argument?: string; expected?: string; actual?: string } = {},
): InvalidArgumentError {
  return new InvalidArgumentError(message, { operation: call, ...details });
}

/** A short description of any value, for the `actual` part of an error. */
export function describeValue(value: unknown): string {
  if (value === null) return 'null';
  if (value === undefined) return 'undefined';
  if (typeof value === 'string') return `'${value}'`;
  if (typeof value === 'number' || typeof value === 'bigint' || typeof value === 'boolean') {
    return `${typeof value} ${String(value)}`;
  }
  if (typeof value === 'object' && 'describe' in value && typeof value.describe === 'function') {
    return String(value.describe());
  }
  if (Array.isArray(value)) return `array of ${value.length}`;
  return typeof value === 'object' ? (value.constructor?.name ?? 'object') : typeof value;
}
