import { assemblePtx, type PtxasResult } from '@rayo/cuda-ptx';
import { expect } from 'vitest';

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
