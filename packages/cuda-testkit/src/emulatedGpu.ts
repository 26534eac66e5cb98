import { type CpuBackend, createCpuBackend } from '@rayo/core';
import type { CudaTuningOptions } from '@rayo/cuda-ptx';
import { CU_DEVICE_ATTRIBUTE, CudaBackend, CudaDriver } from '@rayo/cuda-ptx';
import { afterAll } from 'vitest';
import { FakeLibCuda } from './fakeLibCuda.js';
import { PtxInterpreter } from './ptxInterpreter.js';

export interface EmulatedGpuOptions {
  /** SMs of the fake device: fewer SMs make grids smaller than the work. */
  readonly multiprocessors?: number;
  /** Bytes the fake device lets be allocated. */
  readonly memoryLimit?: number;
  /** The backend's tuning switches. */
  readonly tuning?: CudaTuningOptions;
}

export interface EmulatedGpu {
  readonly fake: FakeLibCuda;
  /** The cuda backend on the fake device; its launches run in the PTX interpreter. */
  readonly gpu: CudaBackend;
  /** The reference to compare with. */
  readonly cpu: CpuBackend;
  dispose(): void;
}

/** A cuda backend on an emulated device, and a cpu backend to check it against. */
export function createEmulatedGpu(options: EmulatedGpuOptions = {}): EmulatedGpu {
  const fake = new FakeLibCuda();
  if (options.memoryLimit !== undefined) fake.memoryLimit = options.memoryLimit;
  if (options.multiprocessors !== undefined) {
    fake.attributes.set(CU_DEVICE_ATTRIBUTE.MULTIPROCESSOR_COUNT, options.multiprocessors);
  }
  new PtxInterpreter(fake).attach();
  const gpu = new CudaBackend(new CudaDriver(fake), options.tuning);
  const cpu = createCpuBackend();
  return {
    fake,
    gpu,
    cpu,
    dispose() {
      gpu.dispose();
      cpu.dispose();
    },
  };
}

/** createEmulatedGpu for a test suite: both backends are disposed after it. */
export function useEmulatedGpu(options: EmulatedGpuOptions = {}): EmulatedGpu {
  const emulated = createEmulatedGpu(options);
  afterAll(() => emulated.dispose());
  return emulated;
}
