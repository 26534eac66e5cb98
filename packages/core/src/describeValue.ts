import { Tensor } from './backend.js';

/** How a wrong argument reads in an error message. */
export function describeValue(value: unknown): string {
  if (typeof value === 'string') return JSON.stringify(value);
  if (value instanceof Tensor) return `tensor ${value.describe()}`;
  if (value === undefined) return 'nothing';
  if (Array.isArray(value)) return `[${value.map(describeValue).join(', ')}]`;
  return String(value);
}
