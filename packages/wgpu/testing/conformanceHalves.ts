import { describeConformance } from '@rayo/conformance';
import { describe, it } from 'vitest';
import { backendProvider, createWgpuBackend } from '../src/index.js';

/**
 * The conformance groups `conformanceFusedAttention.test.ts` runs;
 * `conformance.test.ts` runs every other group (new ones included), so
 * together they run the whole suite once. In one file, a fresh CI machine
 * (Mesa's shader cache cold) spent 64 minutes on one core compiling and
 * running it while the other core sat idle: fused 1,446 s, decoding 939,
 * matmul 408, flashAttention 241, paged 238, the rest about 500. These three
 * are about half of that time, so each of CI's two cores takes one file.
 */
export const FUSED_ATTENTION_GROUPS: ReadonlySet<string> = new Set(['fused', 'flashAttention', 'paged']);

/**
 * Registers the checks of the wgpu conformance suite whose group `takes`
 * picks. Under CI a missing adapter is a failure (the checks then fail with
 * the reason); elsewhere it is reported as a visibly skipped suite.
 */
export async function describeWgpuConformance(
  title: string,
  takes: (group: string) => boolean,
): Promise<void> {
  const unavailable = await backendProvider.probe();
  if (unavailable && process.env.CI !== 'true') {
    describe.skip(`${title} — no WebGPU adapter here: ${unavailable}`, () => {
      it('needs a WebGPU adapter', () => {});
    });
    return;
  }
  // A check's limit grows with the load, as the config's own (vitest.config.ts).
  const timeout = 120_000 * (Number(process.env.RAYO_TIMEOUT_SCALE) || 1);
  describeConformance(title, {
    create: () => createWgpuBackend(),
    timeout,
    select: (checks) => checks.filter((check) => takes(check.group)),
  });
}
