import { InvalidArgumentError } from '@rayo/core';

/**
 * Which transformer blocks keep only their input for backward and run their
 * forward again there (`Tape.checkpoint`): less memory for more compute.
 * - `'none'` (the default): every block keeps what its backward reads.
 * - `'blocks'`: every block is checkpointed; activations alive at once are
 *   the blocks' inputs and one block's own.
 * - `{ every: n }`: blocks 0, n, 2n, … are checkpointed (`{ every: 1 }` is
 *   `'blocks'`), a trade between the two.
 */
export type BlockCheckpointing = 'none' | 'blocks' | { readonly every: number };

/** `value` as a policy, or a RayoError naming `operation`. */
export function checkBlockCheckpointing(value: unknown, operation: string): BlockCheckpointing {
  if (value === 'none' || value === 'blocks') return value;
  const every = (value as { every?: unknown } | null)?.every;
  if (typeof value === 'object' && Number.isInteger(every) && (every as number) >= 1) {
    return { every: every as number };
  }
  throw new InvalidArgumentError('unknown activation checkpointing', {
    operation,
    argument: 'checkpoint',
    expected: "'none', 'blocks' or { every: n } with n a positive integer",
    actual: JSON.stringify(value) ?? String(value),
  });
}

/** Whether block `index` is checkpointed under `policy`. */
export function isCheckpointed(policy: BlockCheckpointing, index: number): boolean {
  if (policy === 'none') return false;
  if (policy === 'blocks') return true;
  return index % policy.every === 0;
}

/** A short name of a policy for ids and reports: `none`, `blocks`, `every2`. */
export function checkpointingName(policy: BlockCheckpointing): string {
  return typeof policy === 'string' ? policy : policy.every === 1 ? 'blocks' : `every${policy.every}`;
}

/** The policy `checkpointingName` names (`none`, `blocks`, `every2`), or a RayoError naming `operation`. */
export function checkpointingFromName(name: string, operation: string): BlockCheckpointing {
  const every = /^every([1-9][0-9]*)$/.exec(name);
  if (every) return Number(every[1]) === 1 ? 'blocks' : { every: Number(every[1]) };
  return checkBlockCheckpointing(name, operation);
}
