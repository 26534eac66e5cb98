import { CHECK_SUBGROUP_LAYOUT } from '../kernels/matmulStream.js';

// Shaders whose workgroups are groups of 32 consecutive invocations, each
// group summing its lanes' values (a column of a GEMV), sum them with
// subgroup shuffles where the adapter has subgroups, instead of a tree in
// workgroup memory with a barrier per level.

/** Lanes of a group (the low 5 bits of the invocation index). */
const LANES = 32;

/** The builtins such a shader takes beside `local_invocation_index tid`. */
export const SUBGROUP_BUILTINS =
  ', @builtin(subgroup_invocation_id) sgid: u32, @builtin(subgroup_size) sgs: u32';

/**
 * WGSL: where subgroups of at least 32 hold invocations in order, xor
 * shuffles below 32 stay inside a group: each of `values` becomes its
 * group's sum in every lane, and `epilogue` runs. Otherwise (`else`) the
 * caller's workgroup-memory tree follows, and `GROUP_SUMS_END` closes the
 * branch. The shader declares `scattered` (`atomic<u32>` in workgroup
 * memory) and takes SUBGROUP_BUILTINS.
 */
export function groupSumsOrElse(values: readonly string[], epilogue: string): string {
  return `
  ${CHECK_SUBGROUP_LAYOUT}
  if (sgs < ${LANES}u) { atomicStore(&scattered, 1u); }
  if (workgroupUniformLoad(&scattered) == 0u) {
    for (var o = ${LANES / 2}u; o > 0u; o >>= 1u) {
      ${values.map((name) => `${name} += subgroupShuffleXor(${name}, o);`).join('\n      ')}
    }
    ${epilogue}
  } else {`;
}

export const GROUP_SUMS_END = '\n  }';
