import { type Backend, backendOptionsFromEnvironment, createBackend } from '@rayo/core';

/**
 * Opens backend `name` with the options this process's environment variables
 * name (the backends' tuning switches, e.g. RAYO_QGEMV_VARIANT or
 * RAYO_WGPU_F16_GEMM), so that measurement commands can set them: how every
 * workload program opens a backend.
 */
export async function createBackendFromEnvironment(name: string): Promise<Backend> {
  return createBackend(name, await backendOptionsFromEnvironment(name, process.env));
}

/**
 * The options this process's environment names for backend `name`, as
 * `key value` pairs (`qgemvActivations int8`), or '' when none: what a
 * report prints beside the device, so that a figure says how it was run.
 */
export async function environmentOptionsNote(name: string): Promise<string> {
  const options = await backendOptionsFromEnvironment(name, process.env);
  return Object.entries(options)
    .map(([key, value]) => `${key} ${String(value)}`)
    .join(', ');
}
