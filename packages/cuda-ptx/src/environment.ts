import { choiceFromEnvironment, type EnvironmentVariables, qgemvOptionsFromEnvironment } from '@rayo/core';
import type { CudaDriverOptions } from './driver/driver.js';
import {
  CUDA_SWITCH_NAMES,
  CUDA_SWITCHES,
  type CudaSwitch,
  type CudaTuningOptions,
  switchChoices,
} from './tuning.js';

/** The options that environment variables name (see cudaOptionsFromEnvironment). */
export type CudaEnvironmentOptions = CudaTuningOptions & Pick<CudaDriverOptions, 'dependentLaunch'>;

/**
 * The options that environment variables name, for programs that take them
 * from the environment (the bench and workloads CLIs, through
 * `backendOptionsFromEnvironment('cuda', process.env)`): RAYO_QGEMV_VARIANT
 * (`a`, `b`, `c`, `d`) → `qgemvVariant`, RAYO_QGEMV_SLICES (1, 2, 4, 8) →
 * `qgemvSlices` (core's), and each switch of CUDA_SWITCHES by its variable:
 * RAYO_QGEMV_MMA (`on`, `off`) → `qgemvMma`,
 * RAYO_QGEMV_ACTIVATIONS (`f32`, `int8`) → `qgemvActivations`,
 * RAYO_QGEMV_PERSISTENT (`on`, `off`) → `qgemvPersistent`,
 * RAYO_QGEMV_DEPTH (1, 2, 3) → `qgemvDepth`, RAYO_QGEMV_BLOCKS_PER_SM (1–4)
 * → `qgemvBlocksPerSm`, RAYO_ATTENTION_SPLIT_TOKENS
 * (16, 32, 64, 128, 256, 512) → `attentionSplitTokens`, RAYO_ATTENTION_UNROLL (1, 2, 4, 8)
 * → `attentionUnroll`, RAYO_ATTENTION_MAX_SPLITS (64, 128, 256) →
 * `attentionMaxSplits`, RAYO_ATTENTION_KERNEL (`mma`, `lanes`) → `attentionKernel`,
 * RAYO_CUDA_WEIGHT_PREFETCH (`on`, `loads`, `chain`, `off`) → `weightPrefetch`, RAYO_GEMV_SLICES
 * (1, 2, 4, 8) → `gemvSlices` and
 * RAYO_CUDA_DEPENDENT_LAUNCH (`0`, `1`) → `dependentLaunch`; unset or empty
 * variables name nothing. This is the one place the package reads the
 * environment: the backend itself never does.
 */
export function cudaOptionsFromEnvironment(
  env: EnvironmentVariables = globalThis.process?.env ?? {},
): CudaEnvironmentOptions {
  const operation = 'cudaOptionsFromEnvironment';
  const switches: Partial<Record<CudaSwitch, string | number>> = {};
  for (const name of CUDA_SWITCH_NAMES) {
    const choice = choiceFromEnvironment(env, CUDA_SWITCHES[name].variable, switchChoices(name), operation);
    if (choice !== undefined) switches[name] = choice;
  }
  const dependentLaunch = choiceFromEnvironment(env, 'RAYO_CUDA_DEPENDENT_LAUNCH', ['0', '1'], operation);
  return {
    ...qgemvOptionsFromEnvironment(env, operation),
    ...(switches as Pick<CudaTuningOptions, CudaSwitch>),
    ...(dependentLaunch === undefined ? {} : { dependentLaunch: dependentLaunch === '1' }),
  };
}
