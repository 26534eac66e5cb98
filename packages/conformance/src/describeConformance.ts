import {
  type ConformanceCheck,
  type ConformanceOptions,
  conformanceSuite,
  UnsupportedOnBackend,
} from '@rayo/core/testing';
import { afterAll, describe, it } from 'vitest';

/**
 * Runs one check as a vitest test. A check of a dtype the backend declares it
 * does not run (its refusal checked, nothing computed) is reported as
 * skipped with why, not as a pass.
 */
export async function runConformanceCheck(
  check: ConformanceCheck,
  context: { skip(note?: string): void },
): Promise<void> {
  try {
    await check.run();
  } catch (error) {
    if (error instanceof UnsupportedOnBackend) context.skip(error.message);
    throw error;
  }
}

/**
 * Registers the conformance suite as vitest tests: one `describe` per group
 * (api, coverage, each kernel family), one `it` per check.
 */
export function describeConformance(title: string, options: ConformanceOptions & { timeout?: number }): void {
  const suite = conformanceSuite(options);
  describe(title, () => {
    const groups = new Map<string, typeof suite.checks>();
    for (const check of suite.checks) groups.set(check.group, [...(groups.get(check.group) ?? []), check]);
    for (const [group, checks] of groups) {
      describe(group, () => {
        for (const check of checks) {
          it(check.name, (context) => runConformanceCheck(check, context), options.timeout ?? 60_000);
        }
      });
    }
    afterAll(() => suite.teardown());
  });
}
