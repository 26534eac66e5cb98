import { type EnvironmentVariables, qgemvOptionsFromEnvironment } from '@rayo/core';
import type { CudaTuningOptions } from './tuning.js';

/**
 * The tuning options that environment variables name, for programs that take
 * them from the environment (the bench and workloads CLIs, through
 * `backendOptionsFromEnvironment('cuda', process.env)`): RAYO_QGEMV_VARIANT
 * (`a`, `b`, `c`, `d`) → `qgemvVariant` and RAYO_QGEMV_SLICES (1, 2, 4, 8) →
 * `qgemvSlices`; unset or empty variables name nothing. This is the one place
 * the package reads the environment: the backend itself never does.
 */
export function cudaOptionsFromEnvironment(
  env: EnvironmentVariables = globalThis.process?.env ?? {},
): CudaTuningOptions {
  return qgemvOptionsFromEnvironment(env, 'cudaOptionsFromEnvironment');
}
