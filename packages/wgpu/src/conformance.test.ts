import { describeConformance } from '@rayo/conformance';
import { describe, it } from 'vitest';
import { backendProvider, createWgpuBackend } from './index.js';

// Under CI a missing adapter is a failure (the suite's checks then fail with
// the reason); elsewhere it is reported as a visibly skipped suite.
const unavailable = await backendProvider.probe();
if (unavailable && process.env.CI !== 'true') {
  describe.skip(`wgpu backend conformance — no WebGPU adapter here: ${unavailable}`, () => {
    it('needs a WebGPU adapter', () => {});
  });
} else {
  // A check's limit grows with the load, as the config's own (vitest.config.ts).
  const timeout = 120_000 * (Number(process.env.RAYO_TIMEOUT_SCALE) || 1);
  describeConformance('wgpu backend conformance', { create: () => createWgpuBackend(), timeout });
}
