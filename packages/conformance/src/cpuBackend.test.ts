import { createCpuBackend } from '@rayo/core';
import { type ConformanceCheck, conformanceSuite, sampleConformance } from '@rayo/core/testing';
import { describe, expect, it } from 'vitest';
import { describeConformance } from './describeConformance.js';

// The cpu backend computes every kernel with its spec's reference, the very
// function the suite compares against, except the matmul family (its own
// gemm): so the matmul family runs every check, and of the others one small
// case of every kernel × variant checks what is the backend's own
// (uploads, preallocated and fresh outputs, batches, half storage widened
// around the f32 reference), without computing the big cases' reference
// twice. RAYO_FULL_CONFORMANCE=1 runs every check.
const OWN_FAMILY = 'matmul';
const full = process.env.RAYO_FULL_CONFORMANCE === '1';

function select(checks: readonly ConformanceCheck[]): readonly ConformanceCheck[] {
  if (full) return checks;
  const sampled = new Set(sampleConformance(checks, 'variant', 'small').checks);
  return checks.filter((c) => c.group === OWN_FAMILY || sampled.has(c));
}

describeConformance('cpu backend conformance', { create: createCpuBackend, select });

describe('the cpu conformance sample', () => {
  it('keeps every check of the matmul family and of no valid case, and every kernel × variant', () => {
    const { checks } = conformanceSuite({ create: createCpuBackend });
    const chosen = select(checks);
    const pairs = (list: readonly ConformanceCheck[]) =>
      new Set(list.flatMap((c) => (c.kernelCase ? [`${c.kernelCase.kernel} ${c.kernelCase.variant}`] : [])));
    expect(pairs(chosen)).toEqual(pairs(checks));
    expect(chosen.filter((c) => c.group === OWN_FAMILY || !c.kernelCase)).toEqual(
      checks.filter((c) => c.group === OWN_FAMILY || !c.kernelCase),
    );
    if (!full) expect(chosen.length).toBeLessThan(checks.length / 2);
  });
});
