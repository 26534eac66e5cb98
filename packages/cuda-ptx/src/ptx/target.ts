import { misuse } from './errors.js';

/**
 * PTX ISA versions and `.target` architectures, and the minimum of each that
 * an instruction needs. The builder checks these as code is written, so a
 * kernel that claims an old target cannot silently use a newer instruction.
 */

/**
 * 8.0 is what the CUDA 12.0 driver JIT-compiles, so any CUDA 12 or 13 driver
 * loads the default modules.
 */
export const DEFAULT_PTX_VERSION = '8.0';
/**
 * sm_75 (Turing) is the oldest architecture CUDA 13 still compiles for; PTX
 * for it is JIT-compiled for every newer GPU. Kernels that need sm_80
 * features (bf16 conversions, cp.async, ...) raise their module's target.
 */
export const DEFAULT_TARGET = 'sm_75';

/** The PTX ISA version each target first appeared in. */
const TARGET_MIN_VERSION: Readonly<Record<string, string>> = {
  sm_75: '6.3',
  sm_80: '7.0',
  sm_86: '7.1',
  sm_87: '7.4',
  sm_88: '9.0',
  sm_89: '7.8',
  sm_90: '7.8',
  sm_90a: '8.0',
  sm_100: '8.6',
  sm_100a: '8.6',
  sm_100f: '8.8',
  sm_101: '8.6',
  sm_101a: '8.6',
  sm_101f: '8.8',
  sm_103: '8.8',
  sm_103a: '8.8',
  sm_103f: '8.8',
  sm_110: '9.0',
  sm_110a: '9.0',
  sm_110f: '9.0',
  sm_120: '8.7',
  sm_120a: '8.7',
  sm_120f: '8.8',
  sm_121: '8.8',
  sm_121a: '8.8',
  sm_121f: '8.8',
};

export const KNOWN_TARGETS: readonly string[] = Object.keys(TARGET_MIN_VERSION);

/** A PTX ISA version as a comparable number: 8.0 -> 80, 7.8 -> 78. */
export function versionNumber(version: string): number {
  const m = /^(\d+)\.(\d)$/.exec(version);
  if (!m) {
    throw misuse('PtxModule', 'malformed PTX ISA version', {
      argument: 'version',
      expected: 'MAJOR.MINOR, e.g. 8.0',
      actual: `'${version}'`,
    });
  }
  return Number(m[1]) * 10 + Number(m[2]);
}

/** The compute capability of a target as a number: sm_90a -> 90. */
export function smNumber(target: string): number {
  return Number(/^sm_(\d+)/.exec(target)?.[1] ?? Number.NaN);
}

export function checkTarget(version: string, target: string): void {
  const min = TARGET_MIN_VERSION[target];
  if (min === undefined) {
    throw misuse('PtxModule', 'unknown target architecture', {
      argument: 'target',
      expected: `one of ${KNOWN_TARGETS.join(', ')}`,
      actual: `'${target}'`,
    });
  }
  if (versionNumber(version) < versionNumber(min)) {
    throw misuse('PtxModule', `target ${target} needs a newer PTX ISA version`, {
      argument: 'version',
      expected: `>= ${min}`,
      actual: version,
    });
  }
}

/** What an instruction needs of the module: a minimum architecture and PTX ISA version. */
export interface Requirement {
  readonly sm: number;
  readonly ptx: string;
}
