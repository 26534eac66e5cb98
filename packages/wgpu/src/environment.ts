import { choiceFromEnvironment, type EnvironmentVariables, qgemvOptionsFromEnvironment } from '@rayo/core';
import { HALF_GEMM_MODES, type WgpuTuningOptions } from './tuning.js';

const WHERE = 'wgpuOptionsFromEnvironment';

/** What the environment can set: the tuning switches and Dawn's unsafe APIs. */
export interface WgpuEnvironmentOptions extends WgpuTuningOptions {
  readonly unsafeApis?: boolean;
}

/**
 * The backend options that environment variables name, for programs that
 * take them from the environment (the bench and workloads CLIs, through
 * `backendOptionsFromEnvironment('wgpu', process.env)`): RAYO_QGEMV_VARIANT
 * (`a`, `b`, `c`, `d`) → `qgemvVariant`, RAYO_QGEMV_SLICES (1, 2, 4, 8) →
 * `qgemvSlices`, RAYO_WGPU_F16_GEMM (`subgroup-matrix`, `emulated`, `widen`)
 * → `f16Gemm` and RAYO_WGPU_UNSAFE_APIS=1 → `unsafeApis: true`; unset or
 * empty variables name nothing. This is the one place the package reads the
 * environment (where there is one: browsers have none): the backend itself
 * never does.
 */
export function wgpuOptionsFromEnvironment(
  env: EnvironmentVariables = globalThis.process?.env ?? {},
): WgpuEnvironmentOptions {
  const f16Gemm = choiceFromEnvironment(env, 'RAYO_WGPU_F16_GEMM', HALF_GEMM_MODES, WHERE);
  const unsafe = choiceFromEnvironment(env, 'RAYO_WGPU_UNSAFE_APIS', ['0', '1'], WHERE);
  return {
    ...qgemvOptionsFromEnvironment(env, WHERE),
    ...(f16Gemm === undefined ? {} : { f16Gemm }),
    ...(unsafe === undefined ? {} : { unsafeApis: unsafe === '1' }),
  };
}
