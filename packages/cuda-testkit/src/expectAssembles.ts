import { assemblePtx, DEFAULT_TARGET, type PtxasResult } from '@rayo/cuda-ptx';
import { expect, it } from 'vitest';

/** What `ptxas -v` prints per entry: `N bytes spill stores, M bytes spill loads`. */
const SPILL_COUNTS = /\d+ bytes spill stores, \d+ bytes spill loads/;
const SPILLS = /\b[1-9]\d* bytes spill (stores|loads)/;

/**
 * Assembles `ptx` for `arch` with `ptxas -v` and expects success, no warning
 * and no register spills. The spill counts must be in the log, so that their
 * absence cannot pass for "no spills".
 */
export function expectAssemblesCleanly(ptx: string, arch: string, what = arch): PtxasResult {
  const result = assemblePtx(ptx, arch, { verbose: true });
  expect(result.ok, `${what}: ptxas failed\n${result.log}`).toBe(true);
  expect(result.log, `${what}: ptxas -v printed no spill counts`).toMatch(SPILL_COUNTS);
  expect(result.log, `${what}: ptxas warned`).not.toMatch(/warning/i);
  expect(result.log, `${what}: the kernel spills registers`).not.toMatch(SPILLS);
  return result;
}

/** A test that `build()`'s PTX assembles cleanly for sm_90 and for the oldest target the backend emits. */
export function itAssemblesForBothTargets(name: string, build: () => { emit(): string }): void {
  it(`${name} for sm_90 and ${DEFAULT_TARGET}`, () => {
    for (const arch of ['sm_90', DEFAULT_TARGET]) expectAssemblesCleanly(build().emit(), arch);
  }, 60_000);
}
