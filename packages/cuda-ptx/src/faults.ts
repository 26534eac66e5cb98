import { type Backend, DeviceLostError, RayoError, relu } from '@rayo/core';
import {
  type FaultScenario,
  type FaultSuiteExtension,
  scenarioFailed,
  settledWithin,
} from '@rayo/core/testing';
import { CudaBackend } from './backend.js';
import { PtxModule } from './ptx/module.js';

/** The module key the faulting kernel is loaded and reported under. */
export const STORE_TO_ADDRESS_KEY = 'faults/store_to_address';

/**
 * One thread stores a word at an arbitrary global address: launched with an
 * address outside every allocation, it faults the way an out-of-bounds
 * kernel does (CUDA_ERROR_ILLEGAL_ADDRESS).
 */
export function storeToAddressModule(): PtxModule {
  const m = new PtxModule();
  m.entry('store_to_address', { address: 'u64', word: 'u32' }, (k, p) => {
    k.stGlobal('u32', k.globalPointer(p.address), k.ldParam(p.word));
  });
  return m;
}

/** Launches the faulting kernel on the backend's stream, through the public PTX and driver API. */
export function launchStoreToAddress(backend: CudaBackend, address: bigint): void {
  const fn = backend.driver.loadFunction(STORE_TO_ADDRESS_KEY, 'store_to_address', storeToAddressModule);
  backend.driver.launch(fn, [1, 1, 1], [1, 1, 1], 0, backend.stream, [address, 0xdead]);
}

async function usable(backend: Backend): Promise<string | undefined> {
  try {
    using x = backend.upload([-2, 3], [2]);
    using y = backend.run(relu, [x])[0]!;
    const values = Array.from(await y.read()).join();
    return values === '0,3' ? undefined : `relu gave ${values}`;
  } catch (error) {
    return (error as Error).message;
  }
}

// Page zero is never mapped for the device.
const BAD_ADDRESS = 0x10n;

const faultingKernel: FaultScenario = {
  name: 'kernel faults (store to an unmapped address)',
  async run(context) {
    const backend = await context.create();
    if (!(backend instanceof CudaBackend)) scenarioFailed(`expected a cuda backend, got ${backend.name}`);
    using x = backend.upload([1, 2, 3, 4], [4]);
    await backend.sync();
    launchStoreToAddress(backend, BAD_ADDRESS);
    const fault = await settledWithin(backend.sync(), 10_000);
    if (!(fault instanceof DeviceLostError))
      scenarioFailed(`sync after the fault: expected DeviceLostError, got ${String(fault)}`);
    if (!fault.operation?.includes(STORE_TO_ADDRESS_KEY)) {
      scenarioFailed(`the error names '${fault.operation}', not the faulting kernel: ${fault.message}`);
    }
    // Each call, named as the error must name it.
    const later: [string, () => unknown][] = [
      ['upload', () => backend.upload([1], [1])],
      ['relu', () => backend.run(relu, [x])],
      ['read', () => backend.read(x)],
      ['batch', () => backend.batch()],
      ['sync', () => backend.sync()],
    ];
    for (const [api, call] of later) {
      const error = await settledWithin(Promise.resolve().then(call), 10_000);
      if (!(error instanceof DeviceLostError) || error.operation !== api) {
        scenarioFailed(
          `${api} after the fault: expected DeviceLostError naming '${api}', got ${String(error)}`,
        );
      }
      if (!error.message.includes('create a new one'))
        scenarioFailed(`${api} after the fault does not say how to recover: ${error.message}`);
    }
    backend.dispose();
    let fresh: string;
    try {
      const problem = await usable(await context.create());
      fresh = problem === undefined ? 'a new backend works' : `a new backend fails too (${problem})`;
    } catch (error) {
      fresh = `a new backend cannot be created (${error instanceof RayoError ? error.message : String(error)})`;
    }
    const code = fault.message.match(/CUDA_ERROR_\w+/)?.[0] ?? 'a CUDA error';
    return `${code} at sync naming '${STORE_TO_ADDRESS_KEY}'; upload, relu, read, batch and sync then refuse with DeviceLostError saying to create a new backend; ${fresh}`;
  },
};

/** The cuda backend's part of the fault suite. */
export const cudaFaultSuite: FaultSuiteExtension = {
  backend: 'cuda',
  scenarios: [faultingKernel],
  objectCounts(backend): Readonly<Record<string, number>> {
    if (!(backend instanceof CudaBackend)) return {};
    const { moduleLoads, allocations } = backend.counts();
    return { moduleLoads, allocations };
  },
};
