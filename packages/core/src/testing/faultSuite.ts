import type { Backend } from '../backend.js';

/** What a fault scenario gets: the backend under test, made on demand, and the soak size. */
export interface FaultContext {
  /** Registry name of the backend under test. */
  readonly backendName: string;
  /**
   * Creates a backend of that name (options are passed to its provider).
   * Every backend created here is disposed after the scenario.
   */
  create(options?: Readonly<Record<string, unknown>>): Promise<Backend>;
  /** Kernels the soak runs. */
  readonly soakKernels: number;
  /** GPU objects a backend created so far (empty where the backend has no such counts). */
  objectCounts(backend: Backend): Readonly<Record<string, number>>;
}

/** What a scenario throws when the fault was not survived; the suite reports its message. */
export class ScenarioFailure extends Error {
  override name = 'NotSurvived';
}

/** Ends a scenario as not survived, saying why. */
export function scenarioFailed(message: string): never {
  throw new ScenarioFailure(message);
}

/** What `promise` settled to within `ms`: 'resolved', its error, or 'still pending'. */
export async function settledWithin(promise: Promise<unknown>, ms: number): Promise<unknown> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const outcome = await Promise.race([
    promise.then(
      () => 'resolved',
      (error: unknown) => error,
    ),
    new Promise((resolve) => {
      timer = setTimeout(() => resolve('still pending'), ms);
    }),
  ]);
  clearTimeout(timer);
  return outcome;
}

export interface FaultScenario {
  readonly name: string;
  /** Registry names of the backends it applies to; every backend when absent. */
  readonly backends?: readonly string[];
  /** Seconds before the scenario is abandoned; may depend on the soak size. */
  timeoutSeconds?(context: FaultContext): number;
  /** Resolves to a one-line outcome when the fault was survived; throws saying what was not. */
  run(context: FaultContext): Promise<string>;
}

/** What a backend package adds to the suite: its own scenarios and GPU object counts. */
export interface FaultSuiteExtension {
  readonly backend: string;
  readonly scenarios?: readonly FaultScenario[];
  /** GPU objects created so far that must stay flat once a workload is warm. */
  objectCounts?(backend: Backend): Readonly<Record<string, number>>;
}

export interface FaultResult {
  readonly scenario: string;
  readonly status: 'survived' | 'FAILED' | 'TIMED OUT';
  readonly outcome: string;
  readonly seconds: number;
}

const extensions: FaultSuiteExtension[] = [];

/** Adds a backend package's scenarios and object counts (a program registers them before running). */
export function extendFaultSuite(extension: FaultSuiteExtension): void {
  extensions.push(extension);
}

export function faultExtensions(backend: string): FaultSuiteExtension[] {
  return extensions.filter((e) => e.backend === backend);
}

const DEFAULT_TIMEOUT_SECONDS = 120;

/**
 * Runs each scenario against fresh backends, one after another, each bounded
 * by its timeout: a scenario that hangs is reported and abandoned, the others
 * still run. Never throws; every scenario gets a result.
 */
export async function runFaultScenarios(
  scenarios: readonly FaultScenario[],
  options: {
    readonly backendName: string;
    readonly create: (options?: Readonly<Record<string, unknown>>) => Promise<Backend>;
    readonly soakKernels: number;
    readonly onResult?: (result: FaultResult) => void;
  },
): Promise<FaultResult[]> {
  const counters = faultExtensions(options.backendName).flatMap((e) =>
    e.objectCounts ? [e.objectCounts] : [],
  );
  const results: FaultResult[] = [];
  for (const scenario of scenarios) {
    const created: Backend[] = [];
    const context: FaultContext = {
      backendName: options.backendName,
      soakKernels: options.soakKernels,
      create: async (backendOptions) => {
        const backend = await options.create(backendOptions);
        created.push(backend);
        return backend;
      },
      objectCounts: (backend) => Object.assign({}, ...counters.map((count) => count(backend))),
    };
    const seconds = scenario.timeoutSeconds?.(context) ?? DEFAULT_TIMEOUT_SECONDS;
    const started = performance.now();
    let timer: ReturnType<typeof setTimeout> | undefined;
    const timedOut = new Promise<FaultResult>((resolve) => {
      timer = setTimeout(
        () =>
          resolve({
            scenario: scenario.name,
            status: 'TIMED OUT',
            outcome: `no outcome within ${seconds} s`,
            seconds,
          }),
        seconds * 1000,
      );
    });
    const ran = scenario.run(context).then(
      (outcome): FaultResult => ({ scenario: scenario.name, status: 'survived', outcome, seconds: 0 }),
      (error: unknown): FaultResult => ({
        scenario: scenario.name,
        status: 'FAILED',
        outcome: describeError(error),
        seconds: 0,
      }),
    );
    const result = await Promise.race([ran, timedOut]);
    clearTimeout(timer);
    for (const backend of created) {
      try {
        backend.dispose();
      } catch {
        // A backend broken by its fault may fail to release; the next scenario gets a new one.
      }
    }
    const done = { ...result, seconds: (performance.now() - started) / 1000 };
    results.push(done);
    options.onResult?.(done);
  }
  return results;
}

function describeError(error: unknown): string {
  if (error instanceof Error) return `${error.name}: ${error.message}`.replace(/\s+/g, ' ');
  return String(error);
}

/** A plain-text table: scenario, status, seconds and outcome. */
export function faultTable(results: readonly FaultResult[]): string {
  const header = ['scenario', 'status', 'seconds', 'outcome'];
  const rows = results.map((r) => [r.scenario, r.status, r.seconds.toFixed(1), r.outcome]);
  const widths = header.slice(0, 3).map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  const line = (cells: readonly string[]) =>
    `| ${cells.map((c, i) => (i < 3 ? c.padEnd(widths[i]!) : c)).join(' | ')} |`;
  const rule = `| ${widths.map((w) => '-'.repeat(w)).join(' | ')} | --- |`;
  return [line(header), rule, ...rows.map(line)].join('\n');
}
