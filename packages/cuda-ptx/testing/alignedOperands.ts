import type { Operand } from '../src/kernel.js';

// Operands for the geometry choosers, which read only an operand's address:
// a 16-byte-aligned one allows `.v4` accesses, one float past it none wider than a word.

export const aligned: Operand = { ptr: 4096n, size: 0, shape: [0], dtype: 'f32', byteLength: 0 };
export const offByOne: Operand = { ...aligned, ptr: 4100n };
