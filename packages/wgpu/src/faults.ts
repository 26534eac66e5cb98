/// <reference types="@webgpu/types" preserve="true" />
import { type Backend, DeviceLostError, OutOfMemoryError, relu, type Tensor } from '@rayo/core';
import {
  type FaultScenario,
  type FaultSuiteExtension,
  scenarioFailed,
  settledWithin,
} from '@rayo/core/testing';
import { WgpuBackend } from './backend.js';
import { workInFlight } from './workInFlight.js';

function wgpu(backend: Backend): WgpuBackend {
  if (!(backend instanceof WgpuBackend)) scenarioFailed(`expected a wgpu backend, got ${backend.name}`);
  return backend;
}

async function expectUsable(backend: Backend, when: string): Promise<void> {
  using x = backend.upload([-2, 3, -4, 5], [4]);
  using y = backend.run(relu, [x])[0]!;
  const values = Array.from(await y.read());
  if (values.join() !== '0,3,0,5') scenarioFailed(`${when}: relu gave ${values.join()}, expected 0,3,0,5`);
}

const MIB = 2 ** 20;

const memoryBudget: FaultScenario = {
  name: 'memory budget: refused at the allocating call, recovered after dispose',
  async run(context) {
    const budget = 256 * MIB;
    const backend = wgpu(await context.create({ memoryBudgetBytes: budget }));
    const held: Tensor[] = [];
    let refused: unknown;
    try {
      for (let i = 0; i < 1024; i++) held.push(backend.zeros([(16 * MIB) / 4]));
    } catch (error) {
      refused = error;
    }
    const count = held.length;
    for (const t of held) t.dispose();
    if (!(refused instanceof OutOfMemoryError))
      scenarioFailed(`expected OutOfMemoryError, got ${String(refused)}`);
    if (refused.operation !== 'zeros')
      scenarioFailed(`the error names '${refused.operation}', not the allocating call 'zeros'`);
    const again = Array.from({ length: 8 }, () => backend.zeros([(24 * MIB) / 4]));
    for (const t of again) t.dispose();
    await expectUsable(backend, 'after dispose');
    await backend.sync();
    return `OutOfMemoryError at 'zeros' after ${count} × 16 MiB in a ${budget / MIB}-MiB budget; after dispose, 8 × 24 MiB and a kernel work (${backend.deviceMemory().usedBytes} bytes held)`;
  },
};

const deviceLoss: FaultScenario = {
  name: 'device lost mid-batch (device.destroy())',
  async run(context) {
    const backend = wgpu(await context.create());
    const { x, submitted, read } = workInFlight(backend, 1 << 20, 500);
    const started = performance.now();
    backend.device.destroy();
    // destroy() itself may wait for the work in flight (lavapipe does); the second counts from its return.
    const destroyed = performance.now();
    const outcomes = await Promise.all([settledWithin(submitted, 1000), settledWithin(read, 1000)]);
    const ms = performance.now() - destroyed;
    outcomes.forEach((o, i) => {
      const what = i === 0 ? 'the pending submit' : 'the pending read';
      if (!(o instanceof DeviceLostError))
        scenarioFailed(`${what}: expected DeviceLostError within 1 s, got ${String(o)}`);
    });
    const later: [string, () => unknown][] = [
      ['upload', () => backend.upload([1], [1])],
      ['run', () => backend.run(relu, [x])],
      ['batch', () => backend.batch()],
    ];
    for (const [what, call] of later) {
      let error: unknown;
      try {
        call();
      } catch (e) {
        error = e;
      }
      if (!(error instanceof DeviceLostError))
        scenarioFailed(`${what} after the loss: expected DeviceLostError, got ${String(error)}`);
    }
    if (!((await settledWithin(backend.sync(), 1000)) instanceof DeviceLostError))
      scenarioFailed('sync after the loss did not reject with DeviceLostError');
    const fresh = await context.create();
    await expectUsable(fresh, 'a new backend after the loss');
    return `destroy() returned after ${(destroyed - started).toFixed(0)} ms; submit and read rejected with DeviceLostError ${ms.toFixed(0)} ms later; upload, run, batch and sync refuse with DeviceLostError; a new backend works`;
  },
};

/** The wgpu backend's part of the fault suite. */
export const wgpuFaultSuite: FaultSuiteExtension = {
  backend: 'wgpu',
  scenarios: [memoryBudget, deviceLoss],
  objectCounts(backend) {
    if (!(backend instanceof WgpuBackend)) return {};
    // Bind groups are left out: eager dispatches make one each, by design.
    const { pipelines, bindGroups: _, ...buffers } = backend.objectCounts();
    return { pipelineCompiles: pipelines.compiles, ...buffers };
  },
};
