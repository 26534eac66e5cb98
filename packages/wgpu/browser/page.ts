// The browser side of the conformance harness: bundled for the page, it runs
// every conformance check of the wgpu backend on the page's navigator.gpu.
import { type ConformanceCheck, conformanceSuite, runChecks, UnsupportedOnBackend } from '@rayo/core/testing';
import { createWgpuBackend } from '../src/index.js';

export interface BrowserConformanceReport {
  /** The backend's description of the adapter, or undefined when the page has none. */
  readonly adapter: string | undefined;
  /** Why there is no adapter, when there is none. */
  readonly unavailable?: string;
  readonly passed: number;
  readonly failed: number;
  /** Checks in a dtype the backend declares it does not run, refused as declared. */
  readonly unsupported: number;
  readonly failures: readonly { readonly name: string; readonly message: string }[];
  /** Seconds spent in each check group, to show where the time goes. */
  readonly groupSeconds: Readonly<Record<string, number>>;
  /** The slowest checks, slowest first, with the pipelines each compiled (compiling is most of SwiftShader's time). */
  readonly slowestChecks: readonly {
    readonly name: string;
    readonly seconds: number;
    readonly compiles: number;
  }[];
  /** Compute pipelines compiled over the whole run. */
  readonly pipelinesCompiled: number;
}

const SLOWEST_KEPT = 5;

/** Set by the Node side (page.exposeFunction) to stream each result as it comes. */
type ReportCheck = (group: string, name: string, error: string | undefined) => Promise<void>;

async function runConformance(filter?: string): Promise<BrowserConformanceReport> {
  const gpu = (globalThis as { navigator?: { gpu?: GPU } }).navigator?.gpu;
  const empty = {
    passed: 0,
    failed: 0,
    unsupported: 0,
    failures: [],
    groupSeconds: {},
    slowestChecks: [],
    pipelinesCompiled: 0,
  };
  if (!gpu) return { adapter: undefined, unavailable: 'the page has no navigator.gpu', ...empty };
  let backend: Awaited<ReturnType<typeof createWgpuBackend>>;
  try {
    backend = await createWgpuBackend();
  } catch (error) {
    return { adapter: undefined, unavailable: (error as Error).message, ...empty };
  }
  const suite = conformanceSuite({ create: () => backend });
  const checks = filter
    ? suite.checks.filter((c) => c.name.includes(filter) || c.group.includes(filter))
    : suite.checks;
  const report = (globalThis as { reportCheck?: ReportCheck }).reportCheck;
  const groupSeconds: Record<string, number> = {};
  const checkSeconds: { name: string; seconds: number; compiles: number }[] = [];
  const compiles = () => backend.objectCounts().pipelines.compiles;
  const timed = checks.map(
    (check): ConformanceCheck => ({
      ...check,
      async run() {
        const started = performance.now();
        const compiledBefore = compiles();
        try {
          await check.run();
        } finally {
          const seconds = (performance.now() - started) / 1000;
          groupSeconds[check.group] = (groupSeconds[check.group] ?? 0) + seconds;
          checkSeconds.push({
            name: `${check.group} › ${check.name}`,
            seconds,
            compiles: compiles() - compiledBefore,
          });
        }
      },
    }),
  );
  const summary = await runChecks(timed, (check, error) => {
    // A declared refusal is no failure: it is counted apart in the summary.
    const failure = error === undefined || error instanceof UnsupportedOnBackend ? undefined : String(error);
    void report?.(check.group, check.name, failure);
  });
  const pipelinesCompiled = compiles();
  await suite.teardown();
  return {
    adapter: backend.info.device,
    passed: summary.passed,
    failed: summary.failed,
    unsupported: summary.unsupported,
    failures: summary.failures,
    groupSeconds,
    pipelinesCompiled,
    slowestChecks: checkSeconds.sort((a, b) => b.seconds - a.seconds).slice(0, SLOWEST_KEPT),
  };
}

(globalThis as { runConformance?: typeof runConformance }).runConformance = runConformance;
