import { expect, it } from 'vitest';
import { describeInChromium } from '../browser/chromium.js';
import { runBrowserConformance } from '../browser/harness.js';

// The whole conformance suite in headless Chromium through navigator.gpu, on
// SwiftShader's WebGPU adapter. Under CI a missing Chromium is a failure;
// elsewhere it is reported as a visibly skipped suite.
describeInChromium('wgpu conformance in a browser', (chromium) => {
  it(
    'passes every check in headless Chromium on navigator.gpu',
    async () => {
      const report = await runBrowserConformance({
        executablePath: chromium(),
        filter: process.env.RAYO_BROWSER_FILTER,
        onCheck: (group, name, error) => {
          if (error) console.log(`FAIL ${group} › ${name}\n     ${error.replace(/\n/g, '\n     ')}`);
        },
      });
      expect(report.adapter, `no WebGPU adapter in the browser: ${report.unavailable}`).toBeDefined();
      const groups = Object.entries(report.groupSeconds)
        .sort(([, a], [, b]) => b - a)
        .slice(0, 5)
        .map(([group, seconds]) => `${group} ${seconds.toFixed(1)} s`);
      const checks = report.slowestChecks.map(
        ({ name, seconds, compiles }) => `${name} ${seconds.toFixed(1)} s, ${compiles} pipelines compiled`,
      );
      console.log(
        `${report.pipelinesCompiled} pipelines compiled; slowest groups: ${groups.join(', ')}\nslowest checks:\n  ${checks.join('\n  ')}`,
      );
      console.log(
        `browser conformance (wgpu, ${report.adapter}): ${report.passed} passed, ${report.failed} failed, ${report.unsupported} unsupported (refused as declared)`,
      );
      expect(report.failures).toEqual([]);
      expect(report.passed).toBeGreaterThan(0);
    },
    25 * 60_000,
  );
});
