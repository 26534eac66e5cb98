import { afterAll, describe, it } from 'vitest';
import { type ConformanceOptions, conformanceSuite } from './conformance.js';
import { UnsupportedOnBackend } from './halfCases.js';

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
          it(
            check.name,
            async (context) => {
              try {
                await check.run();
              } catch (error) {
                // Reported as skipped, with why: the refusal was checked, nothing was computed.
                if (error instanceof UnsupportedOnBackend) context.skip(error.message);
                throw error;
              }
            },
            options.timeout ?? 60_000,
          );
        }
      });
    }
    afterAll(() => suite.teardown());
  });
}
