// The browser side of the conformance harness: bundled for the page, it runs
// the conformance checks of the wgpu backend on the page's navigator.gpu:
// every check, or one valid case of every kernel (`sampleConformance(…, 'kernel')`):
// Dawn in Node runs every dtype, layout and attribute of the same WGSL.
import {
  type ConformanceCheck,
  type ConformanceSample,
  conformanceSuite,
  runChecks,
  sampleConformance,
  UnsupportedOnBackend,
} from '@rayo/core/testing';
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
  /** Checks run (the sample's, the filter's or the whole suite's). */
  readonly checks: number;
  /** What the sample covers, when the run was `sampleConformance`'s sample. */
  readonly sample?: Omit<ConformanceSample, 'checks'>;
}

export interface BrowserConformanceRun {
  /** Only checks whose name or group contains this text (of the whole suite). */
  readonly filter?: string | undefined;
  /** `sampleConformance`'s sample of the suite instead of all of it (ignored with a filter). */
  readonly sample?: boolean | undefined;
}

const SLOWEST_KEPT = 5;

/** Set by the Node side (page.exposeFunction): each result as it comes, then the report or why the run broke. */
interface NodeSide {
  reportCheck?(group: string, name: string, error: string | undefined): Promise<void>;
  reportDone?(report: BrowserConformanceReport): Promise<void>;
  reportFailure?(message: string): Promise<void>;
}

async function runConformance({
  filter,
  sample,
}: BrowserConformanceRun = {}): Promise<BrowserConformanceReport> {
  const gpu = (globalThis as { navigator?: { gpu?: GPU } }).navigator?.gpu;
  const empty = {
    passed: 0,
    failed: 0,
    unsupported: 0,
    failures: [],
    groupSeconds: {},
    slowestChecks: [],
    pipelinesCompiled: 0,
    checks: 0,
  };
  if (!gpu) return { adapter: undefined, unavailable: 'the page has no navigator.gpu', ...empty };
  let backend: Awaited<ReturnType<typeof createWgpuBackend>>;
  try {
    backend = await createWgpuBackend();
  } catch (error) {
    return { adapter: undefined, unavailable: (error as Error).message, ...empty };
  }
  const suite = conformanceSuite({ create: () => backend });
  const sampled = !filter && sample ? sampleConformance(suite.checks, 'kernel') : undefined;
  const checks = filter
    ? suite.checks.filter((c) => c.name.includes(filter) || c.group.includes(filter))
    : (sampled?.checks ?? suite.checks);
  const report = (globalThis as NodeSide).reportCheck;
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
    checks: checks.length,
    ...(sampled
      ? { sample: { total: sampled.total, kernels: sampled.kernels, variants: sampled.variants } }
      : {}),
    slowestChecks: checkSeconds.sort((a, b) => b.seconds - a.seconds).slice(0, SLOWEST_KEPT),
  };
}

/**
 * Starts a run and returns at once; the page reports each check, then the
 * report (or why the run broke), through the functions the Node side exposed,
 * so that no single DevTools call lasts as long as the run.
 */
function startConformance(run: BrowserConformanceRun): void {
  const node = globalThis as NodeSide;
  runConformance(run).then(
    (report) => node.reportDone?.(report),
    (error: unknown) =>
      node.reportFailure?.(error instanceof Error ? (error.stack ?? error.message) : String(error)),
  );
}

(globalThis as { startConformance?: typeof startConformance }).startConformance = startConformance;
