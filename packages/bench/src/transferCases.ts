// Cases that measure the backend rather than a kernel: batched launches,
// host transfers, and the device copy that sets the bandwidth ceiling.

import { add, copy } from '@rayo/core';
import type { BenchCase, SuiteMode } from './case.js';
import { ELEMENT_TOL, EXACT, MIB, type Modes, modes } from './caseDefaults.js';

export function batchCase(chain: number, size: number, when: Modes): BenchCase {
  return {
    id: `batch/${chain}x${size}`,
    family: 'batch',
    spec: add,
    via: 'batch',
    chain,
    inputs: [{ shape: [size] }, { shape: [size] }],
    bound: 'latency',
    x: size,
    ...modes(when),
    tolerance: ELEMENT_TOL,
  };
}

export function bytesLabel(bytes: number): string {
  if (bytes >= MIB && bytes % MIB === 0) return `${bytes / MIB}MiB`;
  return `${bytes / 1024}KiB`;
}

export function transfer(via: 'upload' | 'read', bytes: number, when: Modes): BenchCase {
  return {
    id: `${via}/${bytesLabel(bytes)}`,
    family: via,
    spec: copy,
    via,
    inputs: [{ shape: [bytes / 4] }],
    bound: 'latency',
    x: bytes,
    ...modes(when),
    tolerance: EXACT,
  };
}

/** The device copy that measures a backend's bandwidth ceiling. */
export function copyCase(bytes: number): BenchCase {
  return {
    id: `copy/${bytesLabel(bytes)}`,
    family: 'copy',
    spec: copy,
    inputs: [{ shape: [bytes / 4] }],
    bound: 'bytes',
    x: bytes,
    quick: true,
    full: true,
    tolerance: EXACT,
  };
}

const COPY_BYTES: Readonly<Record<SuiteMode, number>> = { quick: 16 * MIB, full: 256 * MIB };

/**
 * The ceiling case of a mode on a backend: a copy well beyond any L2 cache,
 * never larger than the backend can allocate (`limits.maxBufferBytes`). The
 * copy kernel binds larger operands in pieces where a backend limits one
 * binding (wgpu), so the copy size needs no other bound.
 */
export function ceilingCase(mode: SuiteMode, maxBufferBytes = Number.POSITIVE_INFINITY): BenchCase {
  let bytes = COPY_BYTES[mode];
  while (bytes > maxBufferBytes && bytes > 1024) bytes /= 2;
  return copyCase(bytes);
}
