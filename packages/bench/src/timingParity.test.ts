import { spawnSync } from 'node:child_process';
import { dirname } from 'node:path';
import { describe, expect, it } from 'vitest';
import { buildCaseFile, findBaselineScript } from './baseline.js';
import { selectCases } from './case.js';
import { SUITE } from './suite.js';
import {
  calibrateCalls,
  FULL_TIMING,
  measure,
  nextCallsPerSample,
  QUICK_TIMING,
  type TimingOptions,
} from './timing.js';

// The PyTorch baseline must time by rayo's rules: the same calls per
// device-timed sample, the same warm-up and the same repetitions. These
// tests run the script's own functions on the timing of a real case file
// and compare them with timing.ts, scenario by scenario.

const python = process.env.PYTHON ?? 'python3';
const hasPython = spawnSync(python, ['--version']).status === 0;
// CI must check the script; elsewhere a machine without Python skips these.
const needPython = hasPython || process.env.CI === 'true';

/** A duration per repetition index, and whether the device reports a time for it. */
const durations = [0.4, 7, 13, 2.5, 40, 0.9];
const stepOf = (rep: number) => durations[rep % durations.length]!;

/** Scenarios the script and timing.ts run alike. */
const SCENARIO_PROGRAM = `
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("torch_baseline", sys.argv[1])
tb = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tb)
request = json.load(sys.stdin)
out = {"next": [], "calibrate": [], "measure": []}
for calls, ms, target, most in request["next"]:
    out["next"].append(tb.next_calls_per_sample(calls, ms, target, most))
durations = request["durations"]
for timing in request["timings"]:
    rules = tb.TimingRules(timing)
    for per_call in request["perCall"]:
        asked = []
        def sample(calls):
            asked.append(calls)
            # A clock that rounds to 65.536 us, as Dawn's does unless told not to.
            return (calls * per_call // 0.065536) * 0.065536
        calls = tb.calibrate_calls(sample, rules)
        out["calibrate"].append({"calls": calls, "asked": asked})
    for device in (True, False):
        for warmup in (None, 0, 2):
            clock = [0.0]
            reps = []
            def once(rep):
                reps.append(rep)
                clock[0] += durations[rep % len(durations)]
                return durations[rep % len(durations)] / 3 if device else None
            samples = tb.measure(once, rules, now=lambda: clock[0], warmup=warmup)
            out["measure"].append({"reps": reps, "samples": samples})
print(json.dumps(out))
`;

const caseFileTiming = (timing: TimingOptions) =>
  buildCaseFile(selectCases(SUITE, { mode: 'quick' }).slice(0, 1), 'quick', timing).timing;

const NEXT_GRID: [number, number, number, number][] = [
  [1, 0, 2, 1024],
  [1, 0.01, 2, 1024],
  [1, 2, 2, 1024],
  [8, 0.3, 2, 1024],
  [100, 1.99, 2, 1024],
  [1000, 0.5, 2, 1024],
  [1024, 0.1, 2, 1024],
  [3, 0.7, 1, 16],
];
const PER_CALL = [0.0005, 0.003, 0.05, 0.3, 1.5, 4];

async function typescriptScenarios() {
  const next = NEXT_GRID.map(([calls, ms, target, most]) => nextCallsPerSample(calls, ms, target, most));
  const calibrate: { calls: number; asked: number[] }[] = [];
  const measured: { reps: number[]; samples: number[] }[] = [];
  for (const timing of [QUICK_TIMING, FULL_TIMING]) {
    for (const perCall of PER_CALL) {
      const asked: number[] = [];
      const calls = await calibrateCalls(async (n) => {
        asked.push(n);
        return Math.floor((n * perCall) / 0.065536) * 0.065536;
      }, timing);
      calibrate.push({ calls: calls!, asked });
    }
    for (const device of [true, false]) {
      for (const warmup of [undefined, 0, 2]) {
        let clock = 0;
        const reps: number[] = [];
        const samples = await measure(
          async (rep) => {
            reps.push(rep);
            clock += stepOf(rep);
            return device ? stepOf(rep) / 3 : undefined;
          },
          { ...timing, ...(warmup === undefined ? {} : { warmup }), now: () => clock },
        );
        measured.push({ reps, samples });
      }
    }
  }
  return { next, calibrate, measure: measured };
}

describe('the baseline script times by rayo’s rules', () => {
  it('reads the calls-per-sample rule from the case file', () => {
    expect(caseFileTiming(FULL_TIMING)).toMatchObject({ deviceSampleMs: 2, maxCallsPerSample: 1024 });
    expect(caseFileTiming(QUICK_TIMING)).toMatchObject({ deviceSampleMs: 1, maxCallsPerSample: 1024 });
  });

  it.runIf(needPython)(
    'grows the calls per sample, warms up and repeats exactly as timing.ts does',
    async () => {
      const script = findBaselineScript()!;
      const run = spawnSync(python, ['-c', SCENARIO_PROGRAM, script], {
        input: JSON.stringify({
          next: NEXT_GRID,
          perCall: PER_CALL,
          durations,
          timings: [caseFileTiming(QUICK_TIMING), caseFileTiming(FULL_TIMING)],
        }),
        encoding: 'utf8',
        cwd: dirname(script),
        env: { ...process.env, PYTHONDONTWRITEBYTECODE: '1' },
      });
      expect(run.status, run.stderr).toBe(0);
      const fromPython = JSON.parse(run.stdout);
      const fromTypescript = await typescriptScenarios();
      // The scenarios exercise every branch: calls that grow and that stay, warm-up cut short, the rep cap.
      expect(new Set(fromTypescript.calibrate.map((c) => c.calls)).size).toBeGreaterThan(3);
      expect(fromTypescript.calibrate.some((c) => c.calls === 1024)).toBe(true);
      expect(new Set(fromTypescript.measure.map((m) => m.samples.length)).size).toBeGreaterThan(2);
      expect(fromPython.next).toEqual(fromTypescript.next);
      expect(fromPython.calibrate).toEqual(fromTypescript.calibrate);
      expect(fromPython.measure.map((m: { reps: number[] }) => m.reps)).toEqual(
        fromTypescript.measure.map((m) => m.reps),
      );
      fromPython.measure.forEach((m: { samples: number[] }, i: number) => {
        const expected = fromTypescript.measure[i]!.samples;
        expect(m.samples).toHaveLength(expected.length);
        m.samples.forEach((x, j) => {
          expect(x).toBeCloseTo(expected[j]!, 9);
        });
      });
    },
    60_000,
  );
});
