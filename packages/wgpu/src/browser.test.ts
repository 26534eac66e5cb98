import { conformanceSuite, sampleConformance } from '@rayo/core/testing';
import type { Browser } from 'puppeteer-core';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { describeInChromium, launchChromium } from '../browser/chromium.js';
import { runBrowserConformance } from '../browser/harness.js';

// The conformance suite in headless Chromium through navigator.gpu, on
// SwiftShader's WebGPU adapter: the browser build of the backend, bundled as
// an app bundles it. The same WGSL runs every check of the suite on Dawn in
// Node (conformance*.test.ts, on lavapipe in CI), every dtype, layout,
// attribute and mode included, and SwiftShader spends seconds compiling each
// pipeline, so by default the page runs one valid case of every kernel (its
// dtypes spread over the kernels) and every other check:
// `sampleConformance(…, 'kernel')`. RAYO_FULL_CONFORMANCE=1 runs every check
// here too; RAYO_BROWSER_FILTER=TEXT only the checks whose name or group
// contains TEXT. Under CI a missing Chromium is a failure; elsewhere it is
// reported as a visibly skipped suite.
const full = process.env.RAYO_FULL_CONFORMANCE === '1';
const filter = process.env.RAYO_BROWSER_FILTER || undefined;
// A check compiles at most a few pipelines, seconds each in SwiftShader; on a
// loaded machine (vitest.config.ts sets the factor from the load) longer.
const stallMs = 5 * 60_000 * (Number(process.env.RAYO_TIMEOUT_SCALE) || 1);

/** The checks and kernels of the whole suite and the checks of its sample, counted here in Node. */
function suiteCoverage() {
  const { checks } = conformanceSuite({
    create: () => {
      throw new Error('counting checks creates no backend');
    },
  });
  const kernels = new Set(checks.flatMap((c) => (c.kernelCase ? [c.kernelCase.kernel] : []))).size;
  const sample = sampleConformance(checks, 'kernel');
  return {
    checks: checks.length,
    kernels,
    sampled: sample.checks.length,
    otherChecks: checks.filter((c) => !c.kernelCase).length,
  };
}

describeInChromium('wgpu conformance in a browser', (chromium) => {
  // One Chromium for both runs, each in a page of its own.
  let browser: Browser;
  beforeAll(async () => {
    browser = await launchChromium(chromium(), stallMs);
  });
  afterAll(() => browser?.close());

  it(`passes ${full ? 'every check' : filter ? `the checks matching '${filter}'` : 'one case of every kernel'} in headless Chromium on navigator.gpu`, async () => {
    const report = await runBrowserConformance({
      executablePath: chromium(),
      browser,
      filter,
      sample: !full,
      stallMs,
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
    const sample = report.sample;
    console.log(
      `browser conformance (wgpu, ${report.adapter}): ${report.passed} passed, ${report.failed} failed, ${report.unsupported} unsupported (refused as declared)` +
        (sample
          ? `; the sample: ${report.checks} of ${sample.total} checks, ${sample.kernels} kernels, ${sample.variants} kernel × variant pairs`
          : ''),
    );
    expect(report.failures).toEqual([]);
    expect(report.passed).toBeGreaterThan(0);
    expect(report.passed + report.unsupported).toBe(report.checks);
    if (!filter) {
      const suite = suiteCoverage();
      if (full) {
        expect(report.checks).toBe(suite.checks);
      } else {
        // The sample left out shapes, dtypes and layouts, never a kernel or a check that is no valid case.
        expect(sample).toEqual({ total: suite.checks, kernels: suite.kernels, variants: suite.kernels });
        expect(report.checks).toBe(suite.sampled);
        expect(report.checks).toBe(suite.kernels + suite.otherChecks);
        expect(report.checks).toBeLessThan(suite.checks);
      }
    }
    // No limit on the whole run: on a loaded machine it takes what the machine gives it,
    // and the harness fails a page that stops finishing checks.
  }, 0);

  it('gives up a run that stops finishing checks, naming how far it got', async () => {
    // A stall limit shorter than any check: the watchdog, not the run, ends it.
    await expect(
      runBrowserConformance({ executablePath: chromium(), browser, filter: 'relu', stallMs: 1 }),
    ).rejects.toThrow(
      /^the browser conformance made no progress for 0\.001 s after 0 checks \(the last: none yet\)/,
    );
  });
});
