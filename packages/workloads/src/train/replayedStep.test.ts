import {
  type Backend,
  BackendMismatchError,
  copy,
  createBackend,
  createCpuBackend,
  DisposedTensorError,
  DTypeError,
  type HostArray,
  InvalidArgumentError,
  probeBackends,
  ShapeError,
  type Tensor,
  UnsubmittedWriteError,
} from '@rayo/core';
import { AdamW, type ReplayedBatchInput, ReplayedStep, SGD, trainStep } from '@rayo/train';
import { afterAll, describe, expect, it } from 'vitest';
import { buildWorkload, type Workload, type WorkloadSpec } from './workload.js';

// Small versions of the train-bench workloads: the same kernels, odd sizes.
const SPECS: readonly WorkloadSpec[] = [
  { kind: 'mlp', sizes: [13, 24, 5], activation: 'gelu', batch: 7 },
  { kind: 'transformer', vocab: 11, dim: 8, heads: 2, hidden: 12, blocks: 2, seq: 5, batch: 3 },
];
/** A schedule: the replays must pick up a new rate without re-recording. */
const LRS = [0.01, 0.01, 0.005, 0.02, 0.001, 0.01];
const CLIP = 0.5;

function replayedFor(backend: Backend, spec: WorkloadSpec) {
  const work = buildWorkload(backend, spec, 5);
  const optimizer = new AdamW(work.model.namedParameters(), { lr: LRS[0] });
  const step = new ReplayedStep({
    backend,
    optimizer,
    inputs: Object.fromEntries(
      Object.entries(work.batch).map(([k, v]) => [k, { shape: v.shape, dtype: v.dtype }]),
    ),
    loss: (tape, inputs: Readonly<Record<string, Tensor>>) => work.lossOn(tape, inputs),
    clipNorm: CLIP,
    readGradNorm: true,
  });
  /** Frees the step, the optimizer and the workload, in that order. */
  const dispose = () => {
    step.dispose();
    optimizer.dispose();
    work.dispose();
  };
  return { work, optimizer, step, dispose };
}

/** One batch of a data set: the same values on the host and on the device. */
interface DataBatch {
  readonly host: Readonly<Record<string, { data: HostArray; shape: readonly number[] }>>;
  readonly device: Readonly<Record<string, Tensor>>;
}

/**
 * A small data set uploaded once: the workload's batch rotated by a different
 * number of elements for each batch, so every value stays a valid class or
 * token id and every batch differs.
 */
function deviceBatches(backend: Backend, work: Workload, count: number): DataBatch[] {
  return Array.from({ length: count }, (_, i) => {
    const host = Object.fromEntries(
      Object.entries(work.batch).map(([name, input]) => {
        const n = input.data.length;
        const data = input.data.slice();
        for (let j = 0; j < n; j++) data[j] = input.data[(j + 7 * i) % n]!;
        return [name, { data, shape: input.shape, dtype: input.dtype }];
      }),
    );
    const device = Object.fromEntries(
      Object.entries(host).map(([name, h]) => [name, backend.upload(h.data, h.shape, h.dtype)]),
    );
    return { host, device };
  });
}

/**
 * What a replay is fed each step: `host` the workload's batch from the host;
 * `device` a rotating set of device-resident batches, with the first input
 * given as host data on odd steps (host and device inputs mix freely).
 */
type Feed = 'host' | 'device';

async function compareWithEager(
  makeBackend: () => Promise<Backend> | Backend,
  tolerance: number,
  feed: Feed = 'host',
) {
  for (const spec of SPECS) {
    const backend = await makeBackend();
    try {
      const eagerWork = buildWorkload(backend, spec, 5);
      const eagerOpt = new AdamW(eagerWork.model.namedParameters(), { lr: LRS[0] });
      const { work, optimizer, step, dispose } = replayedFor(backend, spec);
      const data = feed === 'device' ? deviceBatches(backend, work, 3) : [];
      const names = Object.keys(work.batch);
      // The eager step trains on the batch tensors themselves; the replay gets them (or their host values) fed in.
      const eagerInputs = (i: number) =>
        feed === 'device' ? data[i % data.length]!.device : eagerWork.tensors;
      const replayInputs = (i: number): Record<string, ReplayedBatchInput> => {
        if (feed === 'host') return work.batch;
        const { host, device } = data[i % data.length]!;
        return i % 2 === 1 ? { ...device, [names[0]!]: host[names[0]!]! } : device;
      };
      const eager: number[] = [];
      const replayed: number[] = [];
      const eagerNorms: number[] = [];
      const replayedNorms: number[] = [];
      for (const [i, lr] of LRS.entries()) {
        const e = await trainStep({
          backend,
          optimizer: eagerOpt,
          loss: (tape) => eagerWork.lossOn(tape, eagerInputs(i)),
          lr,
          clipNorm: CLIP,
          readGradNorm: true,
        });
        const r = await step.run(replayInputs(i), { lr });
        eager.push(e.loss!);
        replayed.push(r.loss!);
        eagerNorms.push(e.gradNorm!);
        replayedNorms.push(r.gradNorm!);
      }
      expect(step.recorded).toBe(true);
      expect(optimizer.stepCount).toBe(LRS.length);
      // The loss falls, so the replays do train (and not just repeat step 1).
      expect(replayed[LRS.length - 1]!).toBeLessThan(replayed[0]!);
      for (let i = 0; i < LRS.length; i++) {
        expect(Math.abs(replayed[i]! - eager[i]!), `${spec.kind} step ${i + 1} loss`).toBeLessThanOrEqual(
          tolerance * Math.max(1, Math.abs(eager[i]!)),
        );
        expect(
          Math.abs(replayedNorms[i]! - eagerNorms[i]!),
          `${spec.kind} step ${i + 1} norm`,
        ).toBeLessThanOrEqual(tolerance * Math.max(1, Math.abs(eagerNorms[i]!)));
      }
      // The parameters themselves agree after the last update.
      const a = eagerWork.model.parameters();
      const b = work.model.parameters();
      for (let i = 0; i < a.length; i++) {
        const [x, y] = [await a[i]!.value.read(), await b[i]!.value.read()];
        for (let j = 0; j < x.length; j++) {
          expect(
            Math.abs(Number(x[j]) - Number(y[j])),
            `${spec.kind} parameter ${i}[${j}]`,
          ).toBeLessThanOrEqual(tolerance * Math.max(1, Math.abs(Number(x[j]))));
        }
      }
      // The data set outlives the replay: its tensors are the caller's.
      step.dispose();
      for (const d of data) expect(Object.values(d.device).every((t) => !t.disposed)).toBe(true);
      for (const d of data) for (const t of Object.values(d.device)) t.dispose();
      dispose();
      eagerOpt.dispose();
      eagerWork.dispose();
    } finally {
      backend.dispose();
    }
  }
}

async function expectNoAllocations(makeBackend: () => Promise<Backend> | Backend, feed: Feed = 'host') {
  for (const spec of SPECS) {
    const backend = await makeBackend();
    try {
      const { work, optimizer, step, dispose } = replayedFor(backend, spec);
      const data = feed === 'device' ? deviceBatches(backend, work, 3) : [];
      const batchOf = (i: number) => (feed === 'device' ? data[i % data.length]!.device : work.batch);
      // The recording is the only warm-up: every replay after it allocates nothing.
      await step.run(batchOf(0));
      const before = backend.memory();
      for (let i = 0; i < 4; i++) await step.run(batchOf(i + 1), { lr: 0.01 / (i + 1) });
      const after = backend.memory();
      expect(after.allocations - before.allocations, `${spec.kind}: allocations`).toBe(0);
      expect(after.liveTensors, `${spec.kind}: live tensors`).toBe(before.liveTensors);
      // The counter does count: an eager step of the same model allocates its activations.
      await trainStep({ backend, optimizer, loss: (tape) => work.loss(tape) });
      expect(backend.memory().allocations).toBeGreaterThan(after.allocations);
      for (const d of data) for (const t of Object.values(d.device)) t.dispose();
      dispose();
    } finally {
      backend.dispose();
    }
  }
}

describe('ReplayedStep on cpu', () => {
  // The cpu runs the same reference kernels either way; the only difference is
  // the learning rate rounded to f32 in its device tensor, far below 1e-6.
  it('gives the eager step’s losses, norms and parameters over several steps', () =>
    compareWithEager(createCpuBackend, 1e-6));

  it('allocates nothing once warm', () => expectNoAllocations(createCpuBackend));

  it('fed device-resident batches, gives the eager step’s losses, norms and parameters', () =>
    compareWithEager(createCpuBackend, 1e-6, 'device'));

  it('fed device-resident batches, allocates nothing once warm', () =>
    expectNoAllocations(createCpuBackend, 'device'));

  it('takes a view of the declared shape as a device input', async () => {
    const backend = createCpuBackend();
    const { work, step, dispose } = replayedFor(backend, SPECS[0]!);
    const { x, targets } = work.tensors as Record<string, Tensor>;
    using flat = backend.upload(await x!.read(), [x!.size]);
    const viewed = await step.run({ x: flat.reshape([7, 13]), targets: targets! });
    expect(viewed.loss).toBeGreaterThan(0);
    dispose();
  });

  it('refuses a device input of another shape, dtype or backend, a disposed or an unwritten one', async () => {
    const backend = createCpuBackend();
    const other = createCpuBackend();
    const { work, optimizer, step, dispose } = replayedFor(backend, SPECS[0]!);
    const { x, targets } = work.tensors as Record<string, Tensor>;
    await step.run({ x: x!, targets: targets! });
    const refused = async (given: Tensor, error: new (...args: never[]) => Error, expected: object) => {
      const run = step.run({ x: given, targets: targets! });
      await expect(run).rejects.toThrow(error);
      await expect(step.run({ x: given, targets: targets! })).rejects.toMatchObject({
        kernel: 'ReplayedStep',
        argument: 'batch.x',
        ...expected,
      });
    };
    using fewer = backend.zeros([6, 13]);
    await refused(fewer, ShapeError, { expected: '[7, 13]', actual: '[6, 13]' });
    using ints = backend.zeros([7, 13], 'i32');
    await refused(ints, DTypeError, { expected: 'f32', actual: 'i32' });
    using foreign = other.zeros([7, 13]);
    await refused(foreign, BackendMismatchError, {
      expected: 'a tensor of this cpu backend',
      actual: 'a tensor of another cpu backend',
    });
    const gone = backend.zeros([7, 13]);
    gone.dispose();
    await refused(gone, DisposedTensorError, { expected: 'a live tensor' });
    // The output of a batch that was never submitted holds nothing yet.
    const batch = backend.batch();
    const [unwritten] = batch.run(copy, [x!]);
    await refused(unwritten!, UnsubmittedWriteError, {});
    // Host labels as i32 data, device labels must be i32 too.
    using floatTargets = backend.zeros([7]);
    await expect(step.run({ x: x!, targets: floatTargets })).rejects.toMatchObject({
      argument: 'batch.targets',
      expected: 'i32',
      actual: 'f32',
    });
    // Nothing was trained on the refused batches.
    expect(optimizer.stepCount).toBe(1);
    unwritten!.dispose();
    batch.dispose();
    dispose();
    other.dispose();
  });

  it('reports a failed submit, not the loss read beside it', async () => {
    const backend = createCpuBackend();
    const { work, optimizer, step, dispose } = replayedFor(backend, SPECS[0]!);
    await step.run(work.tensors);
    // A parameter the recording updates is gone: the replay cannot run.
    work.model.parameters()[0]!.value.dispose();
    await expect(step.run(work.tensors)).rejects.toThrow(DisposedTensorError);
    expect(optimizer.stepCount).toBe(1);
    dispose();
  });

  it('refuses a batch of another shape, a missing or an unknown input', async () => {
    const backend = createCpuBackend();
    const { work, optimizer, step, dispose } = replayedFor(backend, SPECS[0]!);
    await step.run(work.batch);
    const { x, targets } = work.batch as Record<string, { data: Float32Array; shape: readonly number[] }>;
    const shorter = { x: { data: x!.data.subarray(13), shape: [6, 13] }, targets: targets! };
    await expect(step.run(shorter)).rejects.toThrow(ShapeError);
    await expect(step.run(shorter)).rejects.toMatchObject({
      argument: 'batch.x',
      expected: '[7, 13] (91 values)',
    });
    // A shape that agrees but data that does not fill it.
    await expect(
      step.run({ x: { data: x!.data.subarray(1), shape: [7, 13] }, targets: targets! }),
    ).rejects.toThrow(ShapeError);
    await expect(step.run({ x: x! } as never)).rejects.toMatchObject({ argument: 'batch.targets' });
    await expect(step.run({ ...work.batch, extra: x! } as never)).rejects.toMatchObject({
      argument: 'batch.extra',
    });
    // A refused batch leaves the step count alone.
    expect(optimizer.stepCount).toBe(1);
    dispose();
    await expect(step.run(work.batch)).rejects.toThrow(InvalidArgumentError);
  });

  it('needs AdamW, whose step and rate live on the device', () => {
    const backend = createCpuBackend();
    const work = buildWorkload(backend, SPECS[0]!, 1);
    const sgd = new SGD(work.model.parameters(), { lr: 0.1 });
    expect(
      () =>
        new ReplayedStep({
          backend,
          optimizer: sgd,
          inputs: { x: { shape: [1] } },
          loss: () => undefined as never,
        }),
    ).toThrow(/optimizer/);
    sgd.dispose();
    work.dispose();
  });

  it('leaves the parameters without gradients, so eager steps may follow', async () => {
    const backend = createCpuBackend();
    const { work, optimizer, step, dispose } = replayedFor(backend, SPECS[0]!);
    await step.run(work.batch);
    expect(work.model.parameters().every((p) => p.grad === undefined)).toBe(true);
    const eager = await trainStep({ backend, optimizer, loss: (tape) => work.loss(tape) });
    const replayed = await step.run(work.batch);
    expect(optimizer.stepCount).toBe(3);
    expect(replayed.loss).toBeLessThan(eager.loss!);
    dispose();
  });
});

// Under CI the wgpu backend must be there (Mesa lavapipe): a missing adapter fails the test.
const wgpu = (await probeBackends(['wgpu']))[0]!;
const runWgpu = wgpu.available || process.env.CI === 'true';

describe.skipIf(!runWgpu)('ReplayedStep on wgpu', () => {
  const backends: Backend[] = [];
  const make = async () => {
    const b = await createBackend('wgpu');
    backends.push(b);
    return b;
  };
  afterAll(() => {
    for (const b of backends) b.dispose();
  });
  // The replayed AdamW forms its bias corrections in f32 on the device, the
  // eager one in f64 on the host: a few ulp per update, compounding over six
  // steps through the model, well under 1e-5 relative.
  it(
    'gives the eager step’s losses, norms and parameters over several steps',
    () => compareWithEager(make, 1e-5),
    120_000,
  );

  it('allocates nothing once warm', () => expectNoAllocations(make), 120_000);

  it(
    'fed device-resident batches, gives the eager step’s losses, norms and parameters',
    () => compareWithEager(make, 1e-5, 'device'),
    120_000,
  );

  it(
    'fed device-resident batches, allocates nothing once warm',
    () => expectNoAllocations(make, 'device'),
    120_000,
  );
});
