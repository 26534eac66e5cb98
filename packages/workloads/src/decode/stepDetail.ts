import { messageOf } from '../commandLine.js';
import type { StepProfile } from './stepProfile.js';

/** A step's kernel profile and its host phases, as far as each was measured. */
export interface StepDetail<P> {
  readonly profile?: StepProfile;
  readonly phases?: P;
  /** What failed of the two, each as `what: message` (the other stands). */
  readonly error?: string;
}

/**
 * Runs `profile`, then `phases`; a failure of one is kept as the detail's
 * error instead of losing the other's result.
 */
export async function stepDetail<P>(
  profile: () => Promise<StepProfile>,
  phases: () => Promise<P>,
): Promise<StepDetail<P>> {
  const errors: string[] = [];
  const attempt = async <T>(what: string, measure: () => Promise<T>): Promise<T | undefined> => {
    try {
      return await measure();
    } catch (error) {
      errors.push(`${what}: ${messageOf(error)}`);
      return undefined;
    }
  };
  const measuredProfile = await attempt('step profile', profile);
  const measuredPhases = await attempt('host phases', phases);
  return {
    ...(measuredProfile ? { profile: measuredProfile } : {}),
    ...(measuredPhases ? { phases: measuredPhases } : {}),
    ...(errors.length ? { error: errors.join('; ') } : {}),
  };
}
