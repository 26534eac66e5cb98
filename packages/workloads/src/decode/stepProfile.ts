import {
  type AttrValues,
  type Backend,
  formatShape,
  type InputMetas,
  InvalidArgumentError,
  type KernelRunner,
  resolveAttrs,
  type Tensor,
  type TrackedCall,
  TrackingRunner,
} from '@rayo/core';
import { median } from '../median.js';

/**
 * Where a recorded step's device time goes: the step timed whole on the
 * device, and each group of identical kernel calls (same kernel, input
 * shapes and dtypes, attributes) timed on its own. Backend-neutral: it sees
 * only `KernelRunner` calls and `Backend.deviceTime`.
 */

/**
 * What a recorded step leaves for the profiler to free once the device is
 * done with it: tensors, or anything owning them (a training step's tape).
 */
export interface Owned {
  dispose(): void;
}

/** One `run` call as a step made it. */
type KernelCall = TrackedCall;

/** A runner over `inner` that appends every call to `calls`, its inputs and attributes as they were. */
function recording(inner: KernelRunner, calls: KernelCall[]): TrackingRunner {
  return new TrackingRunner(inner, {
    onRun: (call) =>
      calls.push({ ...call, inputs: [...call.inputs], attrs: call.attrs && { ...call.attrs } }),
  });
}

export interface KernelGroupProfile {
  readonly kernel: string;
  /** The inputs' shapes in order (`-` for an input left out), with a dtype other than f32 named. */
  readonly shapes: string;
  /** The attributes the step gave (defaults left out). */
  readonly attrs: string;
  /** Calls of this group in one step. */
  readonly calls: number;
  /** Bytes a perfect kernel moves per call (the spec's `cost()`, device values substituted); absent without a cost. */
  readonly bytesPerCall?: number;
  readonly flopsPerCall?: number;
  /** Device µs per call: the group's calls run back to back `repetitions` times, divided out. */
  readonly usPerCall?: number;
  readonly usPerStep?: number;
  readonly gbps?: number;
  /** usPerStep over the whole step's device time. */
  readonly shareOfStep?: number;
  /**
   * What the group costs inside the step: the step replayed from its
   * recorded calls, less the step replayed without this group's calls
   * (median of 3 each). Its operands come as cold as in the step, and the
   * gaps it adds between kernels count; a group smaller than the step's
   * jitter can come out near zero or below.
   */
  readonly usInStep?: number;
}

export interface StepProfile {
  /** Kernel calls in one step. */
  readonly calls: number;
  /** Whether the backend measured device time (the cpu backend has no device clock). */
  readonly deviceClock: boolean;
  /** Median device time of the whole step (one graph / one command buffer), ms. */
  readonly stepDeviceMs?: number;
  readonly stepSamplesMs?: readonly number[];
  /** Sorted by µs per step (by bytes when there is no clock). */
  readonly groups: readonly KernelGroupProfile[];
  /** Sum of the groups' µs per step, in ms; below stepDeviceMs by the overhead between kernels. */
  readonly kernelSumMs?: number;
  /** Median device time of the step replayed from its recorded calls, the base of each group's usInStep. */
  readonly replayedStepMs?: number;
  readonly repetitions: number;
}

export interface StepProfileOptions {
  /** Whole-step device timings (median; one untimed warm-up before them). Default 5. */
  readonly stepRepetitions?: number;
  /** Time each group of identical calls (default true); false gives the step time and the call table only. */
  readonly kernels?: boolean;
  /** Back-to-back repetitions of a group per timing. Default 10. */
  readonly repetitions?: number;
  /**
   * Host values of the device tensors the step reads as attributes (a
   * position, a length): the cost of a call is computed at these values
   * rather than at the spec's bound.
   */
  readonly deviceValues?: ReadonlyMap<Tensor, number>;
}

function positiveInteger(name: string, value: number): number {
  if (!Number.isInteger(value) || value < 1) {
    throw new InvalidArgumentError(`${name} must be a positive integer`, {
      operation: 'profileStep',
      argument: name,
      expected: 'an integer >= 1',
      actual: String(value),
    });
  }
  return value;
}

function describeInputs(call: KernelCall): string {
  return call.inputs
    .map((t) => (t ? `${formatShape(t.shape)}${t.dtype === 'f32' ? '' : ` ${t.dtype}`}` : '-'))
    .join(' · ');
}

function describeAttrs(call: KernelCall): string {
  const entries = Object.entries(call.attrs ?? {}).filter(([, v]) => v !== undefined);
  return entries
    .map(([k, v]) => (v === true ? k : `${k} ${typeof v === 'number' ? Number(v.toPrecision(6)) : v}`))
    .join(', ');
}

function metas(inputs: readonly (Tensor | undefined)[]): InputMetas {
  return inputs.map((t) => (t ? { shape: t.shape, dtype: t.dtype } : undefined));
}

/** The call's cost, with inputs that stand for attributes replaced by their known host values. */
function callCost(call: KernelCall, deviceValues: ReadonlyMap<Tensor, number>) {
  const { spec } = call;
  if (!spec.cost) return undefined;
  const inputs = [...call.inputs];
  const attrs: Record<string, unknown> = { ...call.attrs };
  spec.inputs.forEach((decl, i) => {
    const tensor = inputs[i];
    if (decl.attribute === undefined || !tensor) return;
    const value = deviceValues.get(tensor);
    if (value === undefined) return;
    inputs[i] = undefined;
    attrs[decl.attribute] = value;
  });
  const m = metas(inputs);
  return spec.cost(m, resolveAttrs(spec, attrs as Partial<AttrValues>, m));
}

/** Calls that are the same kernel on the same shapes with the same attributes (their tensors may differ). */
export function groupCalls(calls: readonly KernelCall[]): KernelCall[][] {
  const groups = new Map<string, KernelCall[]>();
  for (const call of calls) {
    const key = `${call.spec.name}|${describeInputs(call)}|${describeAttrs(call)}|${call.options?.out ? 'out' : ''}`;
    const group = groups.get(key);
    if (group) group.push(call);
    else groups.set(key, [call]);
  }
  return [...groups.values()];
}

/**
 * Records the step `record` makes into the backend's device timer (one CUDA
 * graph, one command buffer) a few times and takes the median; then, with
 * the tensors of the first recording kept alive as operands, times each
 * group of identical calls alone, and the step replayed from its calls with
 * and without each group. Alone, a group's calls run in step order, each on
 * its own operands, so a group over several layers' weights streams them
 * from memory as the step does; a group whose operands fit in the device's
 * cache (a few MB of KV cache per layer) finds them there on the
 * repetitions, which the step does not: the with-and-without difference
 * does not have that bias. Without a device clock it records the step into
 * a batch, never submitted, and gives the call table without times. Every
 * tensor it allocates is freed.
 */
export async function profileStep<T extends Owned = Tensor>(
  backend: Backend,
  record: (runner: KernelRunner, made: T[]) => void,
  options: StepProfileOptions = {},
): Promise<StepProfile> {
  const stepRepetitions = positiveInteger('stepRepetitions', options.stepRepetitions ?? 5);
  const repetitions = positiveInteger('repetitions', options.repetitions ?? 10);
  const deviceValues = options.deviceValues ?? new Map<Tensor, number>();
  const kept: T[] = [];
  // Filled by the first recording of the step.
  const calls: KernelCall[] = [];
  let recorded = false;
  const deviceTime = backend.deviceTime?.bind(backend);
  try {
    const first = deviceTime
      ? await deviceTime((runner) => {
          record(recording(runner, calls), kept);
          recorded = true;
        })
      : undefined;
    if (first === undefined) {
      // No device clock: the calls are still worth listing, so record them into a batch that is never submitted.
      if (!recorded) {
        const batch = backend.batch();
        try {
          record(recording(batch, calls), kept);
        } finally {
          batch.dispose();
        }
      }
      const groups = groupCalls(calls)
        .map((g) => profileRow(g, undefined, undefined, deviceValues))
        .sort((a, b) => (b.bytesPerCall ?? 0) * b.calls - (a.bytesPerCall ?? 0) * a.calls);
      return { calls: calls.length, deviceClock: false, groups, repetitions };
    }
    const timeOnDevice = deviceTime!;
    // The first recording was the warm-up (pipelines made, caches cold).
    const samples: number[] = [];
    for (let i = 0; i < stepRepetitions; i++) {
      const made: T[] = [];
      try {
        samples.push((await timeOnDevice((runner) => record(runner, made)))!);
      } finally {
        for (const t of made) t.dispose();
      }
    }
    const stepDeviceMs = median(samples);
    if (options.kernels === false) {
      const groups = groupCalls(calls).map((g) => profileRow(g, undefined, stepDeviceMs, deviceValues));
      return {
        calls: calls.length,
        deviceClock: true,
        stepDeviceMs,
        stepSamplesMs: samples,
        groups,
        repetitions,
      };
    }
    // Runs `list` on the device `times` times in one measurement, freeing what it allocates.
    const timeCalls = async (list: readonly KernelCall[], times = 1): Promise<number> => {
      let made: TrackingRunner | undefined;
      try {
        const ms = await timeOnDevice((runner) => {
          made = new TrackingRunner(runner);
          for (let r = 0; r < times; r++) {
            for (const call of list) made.run(call.spec, call.inputs, call.attrs, call.options);
          }
        });
        return ms!;
      } finally {
        made?.dispose();
      }
    };
    const groups = groupCalls(calls);
    const alone: number[][] = groups.map(() => []);
    const without: number[][] = groups.map(() => []);
    const whole: number[] = [];
    // One warm-up round, then three; the step with and without each group alternate, so drift hits both.
    for (let sample = 0; sample < 4; sample++) {
      const all = await timeCalls(calls);
      if (sample > 0) whole.push(all);
      for (const [i, group] of groups.entries()) {
        const ms = await timeCalls(group, repetitions);
        const rest = await timeCalls(calls.filter((c) => !group.includes(c)));
        if (sample === 0) continue;
        alone[i]!.push(ms);
        without[i]!.push(rest);
      }
    }
    const rows = groups.map((group, i) => ({
      ...profileRow(
        group,
        (median(alone[i]!) * 1e3) / (repetitions * group.length),
        stepDeviceMs,
        deviceValues,
      ),
      usInStep: (median(whole) - median(without[i]!)) * 1e3,
    }));
    rows.sort((a, b) => b.usPerStep! - a.usPerStep!);
    const kernelSumMs = rows.reduce((sum, r) => sum + r.usPerStep!, 0) / 1e3;
    return {
      calls: calls.length,
      deviceClock: true,
      stepDeviceMs,
      stepSamplesMs: samples,
      groups: rows,
      kernelSumMs,
      replayedStepMs: median(whole),
      repetitions,
    };
  } finally {
    for (const t of kept) t.dispose();
  }
}

function profileRow(
  group: readonly KernelCall[],
  usPerCall: number | undefined,
  stepDeviceMs: number | undefined,
  deviceValues: ReadonlyMap<Tensor, number>,
): KernelGroupProfile {
  const call = group[0]!;
  const cost = callCost(call, deviceValues);
  const usPerStep = usPerCall === undefined ? undefined : usPerCall * group.length;
  return {
    kernel: call.spec.name,
    shapes: describeInputs(call),
    attrs: describeAttrs(call),
    calls: group.length,
    ...(cost ? { bytesPerCall: cost.bytes, flopsPerCall: cost.flops } : {}),
    ...(usPerCall === undefined ? {} : { usPerCall, usPerStep }),
    ...(cost && usPerCall ? { gbps: cost.bytes / (usPerCall * 1e3) } : {}),
    ...(usPerStep !== undefined && stepDeviceMs ? { shareOfStep: usPerStep / (stepDeviceMs * 1e3) } : {}),
  };
}

function fmt(x: number | undefined, digits = 3): string {
  return x === undefined || !Number.isFinite(x) ? '—' : String(Number(x.toPrecision(digits)));
}

function bytesText(bytes: number | undefined): string {
  if (bytes === undefined) return '—';
  if (bytes >= 1e6) return `${fmt(bytes / 1e6)} MB`;
  if (bytes >= 1e3) return `${fmt(bytes / 1e3)} KB`;
  return `${bytes} B`;
}

export const PROFILE_HEADER = [
  'kernel',
  'shapes',
  'attrs',
  'calls/step',
  'µs/call',
  'µs/step',
  'bytes/call',
  'GB/s',
  '% of step',
  'µs in step',
];

/** The breakdown as table rows (strings), in the profile's order. */
export function profileRows(profile: StepProfile): string[][] {
  return profile.groups.map((g) => [
    g.kernel,
    g.shapes,
    g.attrs || '—',
    String(g.calls),
    fmt(g.usPerCall),
    fmt(g.usPerStep),
    bytesText(g.bytesPerCall),
    fmt(g.gbps),
    g.shareOfStep === undefined ? '—' : `${fmt(100 * g.shareOfStep, 2)}%`,
    fmt(g.usInStep),
  ]);
}

/** One line under the table: the kernels' sum against the whole step. */
export function profileTotals(profile: StepProfile): string {
  if (!profile.deviceClock)
    return `${profile.calls} kernel calls per step; no device clock on this backend, so no times`;
  const step = profile.stepDeviceMs!;
  if (profile.kernelSumMs === undefined)
    return `${profile.calls} kernel calls per step; the step ${fmt(step * 1e3)} µs on the device (kernels not timed one by one)`;
  const gap = step - profile.kernelSumMs;
  return (
    `${profile.calls} kernel calls per step; the kernels timed alone sum to ${fmt(profile.kernelSumMs * 1e3)} µs, ` +
    `the whole step takes ${fmt(step * 1e3)} µs on the device: ${fmt(gap * 1e3)} µs ` +
    `(${fmt((100 * gap) / step, 2)}%) between kernels (launch and dependency gaps inside the graph or command buffer). ` +
    `µs in step: the step replayed from its calls (${fmt((profile.replayedStepMs ?? Number.NaN) * 1e3)} µs) ` +
    'less the same without the group'
  );
}
