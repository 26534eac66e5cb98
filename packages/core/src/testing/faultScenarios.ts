import type { Backend, Tensor } from '../backend.js';
import { CpuBackend } from '../cpu/backend.js';
import { DisposedTensorError, OutOfMemoryError } from '../errors.js';
import { add, relu, scale } from '../kernels/elementwise.js';
import { sum } from '../kernels/reduction.js';
import { compareOutputs } from './compare.js';
import { runChecks } from './conformance.js';
import { faultContractChecks } from './faultContract.js';
import { type FaultContext, type FaultScenario, ScenarioFailure, scenarioFailed } from './faultSuite.js';

function errorName(error: unknown): string {
  return error instanceof Error ? `${error.name}: ${error.message}` : String(error);
}

const GIB = 2 ** 30;

const memoryContract: FaultScenario = {
  name: 'memory contract (unsubmitted reads, fresh tensors, oversized allocation)',
  async run(context) {
    const backend = await context.create();
    const checks = faultContractChecks(async () => backend);
    const summary = await runChecks(checks);
    if (summary.failed > 0) scenarioFailed(summary.failures.map((f) => `${f.name}: ${f.message}`).join('; '));
    return `${summary.passed} checks passed`;
  },
};

/** A relu on the backend gives the right answer: the backend is usable. */
async function expectUsable(backend: Backend, when: string): Promise<void> {
  using x = backend.upload([-2, 3, -4, 5], [4]);
  using y = backend.run(relu, [x])[0]!;
  const values = Array.from(await y.read());
  if (values.join() !== '0,3,0,5') scenarioFailed(`${when}: relu gave ${values.join()}, expected 0,3,0,5`);
}

/**
 * How the backend got memory back after the device refused an allocation,
 * where it counts that (wgpu: queue waits for deferred frees, retried
 * allocations), so that a GPU run shows what recovery took.
 */
function memoryRecovery(backend: Backend): string {
  const describe = (backend as { describeMemoryRecovery?: () => string }).describeMemoryRecovery;
  return typeof describe === 'function' ? ` (recovery: ${describe.call(backend)})` : '';
}

const outOfMemory: FaultScenario = {
  name: 'out of memory, then recovery once memory is freed',
  timeoutSeconds: () => 300,
  async run(context) {
    const backend = await context.create();
    const { maxBufferBytes } = backend.info.limits;
    let tooBig: unknown;
    try {
      backend.empty([Math.floor(maxBufferBytes / 4) + 1]).dispose();
      await backend.sync();
    } catch (error) {
      tooBig = error;
    }
    if (!(tooBig instanceof OutOfMemoryError)) {
      scenarioFailed(`one allocation beyond maxBufferBytes gave ${tooBig ? errorName(tooBig) : 'no error'}`);
    }
    await expectUsable(backend, 'after the oversized allocation');
    const once = `OutOfMemoryError at '${tooBig.operation}' for one oversized allocation; the backend works after it`;
    if (backend.info.kind !== 'gpu') return once;
    // A software adapter's device memory is the host's: filling it would starve the machine.
    if (/llvmpipe|lavapipe|swiftshader/i.test(backend.info.device))
      return `${once}; device fill skipped on a software adapter`;

    // Fill the device in chunks until it refuses, then free everything.
    const chunk = Math.min(GIB, Math.floor(maxBufferBytes / 4) * 4);
    const held: Tensor[] = [];
    let refused: unknown;
    let where = 'the allocating call';
    // Past any device memory there is (beyond it, memory would not be the device's).
    const maxChunks = Math.ceil(Math.max(160 * GIB, 1.25 * maxBufferBytes) / chunk);
    for (let i = 0; i < maxChunks && refused === undefined; i++) {
      try {
        held.push(backend.zeros([chunk / 4]));
      } catch (error) {
        refused = error;
        break;
      }
      if (i % 4 === 3) {
        try {
          await backend.sync();
        } catch (error) {
          refused = error;
          where = 'the next sync';
        }
      }
    }
    const heldBytes = held.length * chunk;
    for (const t of held) t.dispose();
    if (refused === undefined) scenarioFailed(`no error after allocating ${heldBytes / GIB} GiB`);
    if (!(refused instanceof OutOfMemoryError)) {
      scenarioFailed(`after ${heldBytes / GIB} GiB: expected OutOfMemoryError, got ${errorName(refused)}`);
    }
    // Other sizes than before, so that freed memory must really return to the
    // device: half allocated at once after the frees, half after a sync.
    const again: Tensor[] = [];
    const elements = (chunk * 3) / 16;
    try {
      for (let i = 0; i < 2; i++) again.push(backend.zeros([elements]));
      try {
        await backend.sync();
      } catch (error) {
        scenarioFailed(
          `sync after freeing everything and allocating 2 × ${(elements * 4) / 2 ** 20} MiB at once: ${errorName(error)}`,
        );
      }
      const first = await again[0]!.read();
      if (!first.every((v) => v === 0))
        scenarioFailed('a tensor allocated at once after the frees does not hold zeros');
      for (let i = 0; i < 2; i++) again.push(backend.zeros([elements]));
      await backend.sync();
      await expectUsable(backend, 'after freeing everything');
    } catch (error) {
      if (error instanceof ScenarioFailure) scenarioFailed(`${error.message}${memoryRecovery(backend)}`);
      scenarioFailed(`after freeing everything: ${errorName(error)}${memoryRecovery(backend)}`);
    } finally {
      for (const t of again) t.dispose();
    }
    return `OutOfMemoryError at '${tooBig.operation}' for one oversized allocation; after ${(heldBytes / GIB).toFixed(0)} GiB in ${chunk / 2 ** 20}-MiB chunks, OutOfMemoryError at ${where} ('${refused.operation}'); after dispose, 2 × ${(elements * 4) / 2 ** 20} MiB allocated at once hold zeros, 2 more after a sync and kernels work${memoryRecovery(backend)}`;
  },
};

const SOAK_N = 256;
const SOAK_BATCH_KERNELS = 15;

/** The soak's workload on one backend: eager kernels, a replayed batch and weight-cache products. */
function soakWorkload(backend: Backend) {
  const ramp = Float32Array.from({ length: SOAK_N }, (_, i) => Math.sin(i) * 2);
  const x = backend.upload(ramp, [SOAK_N]);
  const cache = backend.createWeightCache();
  cache.upload(
    'w',
    Float32Array.from({ length: 16 * 16 }, (_, i) => Math.cos(i) / 4),
    [16, 16],
  );
  const rows = backend.upload(ramp.subarray(0, 64), [4, 16]);
  const batch = backend.batch();
  let y = x;
  for (let i = 0; i < SOAK_BATCH_KERNELS / 3; i++) {
    const scaled = batch.run(scale, [y], { alpha: 0.5, beta: 0.25 })[0]!;
    const rectified = batch.run(relu, [scaled])[0]!;
    y = batch.run(add, [rectified, x])[0]!;
  }
  return {
    x,
    batched: y,
    batch,
    /** One round: 3 eager kernels, 1 weight-cache product, the batch's replay. Returns kernels run. */
    async round(): Promise<number> {
      const doubled = backend.run(add, [x, x])[0]!;
      const rectified = backend.run(relu, [doubled])[0]!;
      doubled.dispose();
      backend.run(sum, [rectified])[0]!.dispose();
      rectified.dispose();
      cache.matmul('w', rows).dispose();
      await batch.submit();
      return 4 + SOAK_BATCH_KERNELS;
    },
    async results(): Promise<{ batched: ArrayLike<number>; product: ArrayLike<number> }> {
      using product = cache.matmul('w', rows);
      return { batched: await y.read(), product: await product.read() };
    },
    dispose(): void {
      cache.dispose();
      rows.dispose();
      x.dispose();
    },
  };
}

const soak: FaultScenario = {
  name: 'soak of mixed kernels (eager, batched, weight cache): memory and GPU objects flat',
  timeoutSeconds: (context) => 120 + Math.ceil(context.soakKernels / 2000),
  async run(context) {
    const backend = await context.create();
    const work = soakWorkload(backend);
    const warmRounds = 50;
    let kernels = 0;
    let round = 0;
    let warm: { memory: unknown; objects: Readonly<Record<string, number>> } | undefined;
    while (kernels < context.soakKernels || round <= warmRounds) {
      kernels += await work.round();
      round++;
      if (round === warmRounds) {
        // Reads are part of the workload: their staging buffers exist from here on.
        await work.results();
        await backend.sync();
        warm = { memory: backend.memory(), objects: context.objectCounts(backend) };
      }
    }
    await backend.sync();
    const got = await work.results();
    const reference = soakWorkload(new CpuBackend());
    await reference.round();
    const want = await reference.results();
    const mismatch =
      compareOutputs('f32', got.batched as Float32Array, want.batched as Float32Array, {
        rtol: 1e-5,
        atol: 1e-5,
      }) ??
      compareOutputs('f32', got.product as Float32Array, want.product as Float32Array, {
        rtol: 1e-4,
        atol: 1e-5,
      });
    if (mismatch)
      scenarioFailed(`after ${kernels} kernels the results differ from the reference: ${mismatch}`);
    const memory = backend.memory();
    const objects = context.objectCounts(backend);
    const before = warm!.memory as typeof memory;
    const grew: string[] = [];
    if (memory.liveTensors !== before.liveTensors)
      grew.push(`liveTensors ${before.liveTensors} → ${memory.liveTensors}`);
    if (memory.liveBytes !== before.liveBytes)
      grew.push(`liveBytes ${before.liveBytes} → ${memory.liveBytes}`);
    for (const [name, count] of Object.entries(objects)) {
      if (count !== warm!.objects[name]) grew.push(`${name} ${warm!.objects[name]} → ${count}`);
    }
    work.dispose();
    if (grew.length > 0)
      scenarioFailed(`after ${kernels} kernels, not flat since warm-up: ${grew.join(', ')}`);
    const counted = Object.keys(objects);
    return `${kernels} kernels in ${round} rounds; live tensors (${memory.liveTensors}), bytes (${memory.liveBytes})${counted.length > 0 ? ` and ${counted.join(', ')}` : ''} flat since round ${warmRounds}`;
  },
};

const concurrentReads: FaultScenario = {
  name: '100 concurrent reads racing with disposals',
  async run(context: FaultContext) {
    const backend = await context.create();
    const count = 100;
    const tensors = Array.from({ length: count }, (_, i) =>
      backend.upload(new Float32Array(1024 + i).fill(i), [1024 + i]),
    );
    const reads = tensors.map((t) => t.read());
    // Dispose every other tensor while its read is in flight, and reuse the memory at once.
    const reused: Tensor[] = [];
    for (let i = 0; i < count; i += 2) {
      tensors[i]!.dispose();
      reused.push(backend.upload(new Float32Array(1024 + i).fill(-1), [1024 + i]));
    }
    const settled = await Promise.allSettled(reads);
    let own = 0;
    let refused = 0;
    settled.forEach((s, i) => {
      if (s.status === 'fulfilled') {
        const v = s.value;
        if (v.length !== 1024 + i || Array.prototype.some.call(v, (x: number) => x !== i)) {
          scenarioFailed(
            `read ${i} resolved with data that is not its tensor's (first value ${v[0]}, length ${v.length})`,
          );
        }
        own++;
      } else {
        if (!(s.reason instanceof DisposedTensorError)) {
          scenarioFailed(
            `read ${i} rejected with ${errorName(s.reason)}, expected DisposedTensorError or its data`,
          );
        }
        if (i % 2 === 1) scenarioFailed(`read ${i} of a live tensor rejected: ${errorName(s.reason)}`);
        refused++;
      }
    });
    for (const t of [...tensors, ...reused]) t.dispose();
    if (backend.memory().liveTensors !== 0)
      scenarioFailed(`${backend.memory().liveTensors} tensors still live after disposing all`);
    return `${count} reads: ${own} resolved with their own data, ${refused} rejected with DisposedTensorError`;
  },
};

/** The backend-neutral scenarios; backend packages add their own through `extendFaultSuite`. */
export const FAULT_SCENARIOS: readonly FaultScenario[] = [memoryContract, outOfMemory, soak, concurrentReads];
