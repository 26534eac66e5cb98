import {
  BackendUnavailableError,
  DeviceLostError,
  KernelCompileError,
  OutOfMemoryError,
  RayoError,
} from '@rayo/core';
import { describe, expect, it } from 'vitest';
import { CudaCallError, cudaError, cudaErrorName, isStickyError } from './errors.js';

const failure = (call: string, code: number, name = cudaErrorName(code), description?: string) => ({
  call,
  code,
  name,
  description,
});

describe('CUresult translation', () => {
  it('knows the names of common codes and makes one up for others', () => {
    expect(cudaErrorName(2)).toBe('CUDA_ERROR_OUT_OF_MEMORY');
    expect(cudaErrorName(218)).toBe('CUDA_ERROR_INVALID_PTX');
    expect(cudaErrorName(700)).toBe('CUDA_ERROR_ILLEGAL_ADDRESS');
    expect(cudaErrorName(906)).toBe('CUDA_ERROR_STREAM_CAPTURE_IMPLICIT');
    expect(cudaErrorName(12345)).toBe('CUDA_ERROR_12345');
  });

  it('names the call and the CUDA error, and carries the raw status as the cause', () => {
    const e = cudaError(failure('cuMemAlloc_v2', 2, 'CUDA_ERROR_OUT_OF_MEMORY', 'out of memory'));
    expect(e).toBeInstanceOf(OutOfMemoryError);
    expect(e.message).toBe('cuMemAlloc_v2: CUDA_ERROR_OUT_OF_MEMORY (2): out of memory');
    expect(e.operation).toBe('cuMemAlloc_v2');
    const cause = e.cause as CudaCallError;
    expect(cause).toBeInstanceOf(CudaCallError);
    expect([cause.call, cause.code, cause.name, cause.description]).toEqual([
      'cuMemAlloc_v2',
      2,
      'CUDA_ERROR_OUT_OF_MEMORY',
      'out of memory',
    ]);
  });

  it('appends details and names the subject when there is one', () => {
    const e = cudaError(failure('cuLaunchKernel', 701), {
      subject: 'elementwise/map/gelu',
      detail: 'entry ew_gelu, grid [4, 1, 1]',
    });
    expect(e.constructor).toBe(RayoError);
    expect(e.operation).toBe('elementwise/map/gelu');
    expect(e.message).toBe(
      'elementwise/map/gelu: cuLaunchKernel: CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES (701) (entry ew_gelu, grid [4, 1, 1])',
    );
  });

  it('turns JIT failures of cuModuleLoadDataEx into KernelCompileError carrying the log', () => {
    for (const code of [200, 209, 218, 221, 222, 223]) {
      const e = cudaError(failure('cuModuleLoadDataEx', code), { subject: 'k', log: 'line 4: error\n' });
      expect(e, String(code)).toBeInstanceOf(KernelCompileError);
      expect((e as KernelCompileError).log).toBe('line 4: error');
      expect(e.message).toContain(`cuModuleLoadDataEx: ${cudaErrorName(code)} (${code})`);
    }
    const empty = cudaError(failure('cuModuleLoadDataEx', 218), { log: '  ' }) as KernelCompileError;
    expect(empty.log).toBe('(the JIT compiler wrote no log)');
    // The same code from another call is not a compile error.
    expect(cudaError(failure('cuModuleGetFunction', 218))).not.toBeInstanceOf(KernelCompileError);
    // Out of memory while loading is still out of memory.
    expect(cudaError(failure('cuModuleLoadDataEx', 2))).toBeInstanceOf(OutOfMemoryError);
  });

  it('reports errors that poison the context as DeviceLostError', () => {
    for (const code of [700, 702, 709, 710, 714, 715, 716, 717, 718, 719]) {
      expect(isStickyError(code)).toBe(true);
      const e = cudaError(failure('cuStreamSynchronize', code));
      expect(e, String(code)).toBeInstanceOf(DeviceLostError);
      expect(e.message).toContain('dispose the backend and create a new one');
    }
    expect(isStickyError(1)).toBe(false);
  });

  it('reports a missing device or driver as BackendUnavailableError', () => {
    for (const code of [3, 34, 36, 46, 100, 101, 803]) {
      expect(cudaError(failure('cuInit', code)), String(code)).toBeInstanceOf(BackendUnavailableError);
    }
  });

  it('leaves everything else a plain RayoError', () => {
    const e = cudaError(failure('cuMemcpyDtoH_v2', 1, 'CUDA_ERROR_INVALID_VALUE', 'invalid argument'));
    expect(e.constructor).toBe(RayoError);
    expect(e.message).toBe('cuMemcpyDtoH_v2: CUDA_ERROR_INVALID_VALUE (1): invalid argument');
  });
});
