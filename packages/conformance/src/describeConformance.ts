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

export interface DescribeConformanceOptions extends ConformanceOptions {
  /** Milliseconds each check may take (default 60 s). */
  readonly timeout?: number;
  /** The checks to register, of the suite's (default all of them), e.g. `sampleConformance`'s. */
  readonly select?: (checks: readonly ConformanceCheck[]) => readonly ConformanceCheck[];
}

/**
 * Registers the conformance suite (or the checks `select` picks of it) as
 * vitest tests: one `describe` per group (api, coverage, each kernel family),
 * one `it` per check.
 */
export function describeConformance(title: string, options: DescribeConformanceOptions): void {
  const suite = conformanceSuite(options);
  const checks = options.select ? options.select(suite.checks) : suite.checks;
  describe(title, () => {
    const groups = new Map<string, readonly ConformanceCheck[]>();
    for (const check of checks) groups.set(check.group, [...(groups.get(check.group) ?? []), check]);
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
