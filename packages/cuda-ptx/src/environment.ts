import { choiceFromEnvironment, type EnvironmentVariables, qgemvOptionsFromEnvironment } from '@rayo/core';
import type { CudaDriverOptions } from './driver/driver.js';
import {
  ATTENTION_SPLIT_CHOICES,
  ATTENTION_UNROLL_CHOICES,
  type CudaTuningOptions,
  QGEMV_ACTIVATION_CHOICES,
  QGEMV_BLOCKS_PER_SM_CHOICES,
  QGEMV_DEPTH_CHOICES,
  QGEMV_MMA_CHOICES,
  QGEMV_PERSISTENT_CHOICES,
} from './tuning.js';

/** The options that environment variables name (see cudaOptionsFromEnvironment). */
export type CudaEnvironmentOptions = CudaTuningOptions & Pick<CudaDriverOptions, 'dependentLaunch'>;

/**
 * The options that environment variables name, for programs that take them
 * from the environment (the bench and workloads CLIs, through
 * `backendOptionsFromEnvironment('cuda', process.env)`): RAYO_QGEMV_VARIANT
 * (`a`, `b`, `c`, `d`) → `qgemvVariant`, RAYO_QGEMV_SLICES (1, 2, 4, 8) →
 * `qgemvSlices`, RAYO_QGEMV_MMA (`on`, `off`) → `qgemvMma`,
 * RAYO_QGEMV_ACTIVATIONS (`f32`, `int8`) → `qgemvActivations`,
 * RAYO_QGEMV_PERSISTENT (`on`, `off`) → `qgemvPersistent`,
 * RAYO_QGEMV_DEPTH (1, 2, 3) → `qgemvDepth`, RAYO_QGEMV_BLOCKS_PER_SM (1–4)
 * → `qgemvBlocksPerSm`, RAYO_ATTENTION_SPLIT_TOKENS
 * (16, 32, 64, 128) → `attentionSplitTokens`, RAYO_ATTENTION_UNROLL (1, 2, 4, 8)
 * → `attentionUnroll` and
 * RAYO_CUDA_DEPENDENT_LAUNCH (`0`, `1`) → `dependentLaunch`; unset or empty
 * variables name nothing. This is the one place the package reads the
 * environment: the backend itself never does.
 */
export function cudaOptionsFromEnvironment(
  env: EnvironmentVariables = globalThis.process?.env ?? {},
): CudaEnvironmentOptions {
  const operation = 'cudaOptionsFromEnvironment';
  const qgemvMma = choiceFromEnvironment(env, 'RAYO_QGEMV_MMA', QGEMV_MMA_CHOICES, operation);
  const qgemvActivations = choiceFromEnvironment(
    env,
    'RAYO_QGEMV_ACTIVATIONS',
    QGEMV_ACTIVATION_CHOICES,
    operation,
  );
  const qgemvPersistent = choiceFromEnvironment(
    env,
    'RAYO_QGEMV_PERSISTENT',
    QGEMV_PERSISTENT_CHOICES,
    operation,
  );
  const qgemvDepth = choiceFromEnvironment(env, 'RAYO_QGEMV_DEPTH', QGEMV_DEPTH_CHOICES, operation);
  const qgemvBlocksPerSm = choiceFromEnvironment(
    env,
    'RAYO_QGEMV_BLOCKS_PER_SM',
    QGEMV_BLOCKS_PER_SM_CHOICES,
    operation,
  );
  const attentionSplitTokens = choiceFromEnvironment(
    env,
    'RAYO_ATTENTION_SPLIT_TOKENS',
    ATTENTION_SPLIT_CHOICES,
    operation,
  );
  const attentionUnroll = choiceFromEnvironment(
    env,
    'RAYO_ATTENTION_UNROLL',
    ATTENTION_UNROLL_CHOICES,
    operation,
  );
  const dependentLaunch = choiceFromEnvironment(env, 'RAYO_CUDA_DEPENDENT_LAUNCH', ['0', '1'], operation);
  return {
    ...qgemvOptionsFromEnvironment(env, operation),
    ...(qgemvMma === undefined ? {} : { qgemvMma }),
    ...(qgemvActivations === undefined ? {} : { qgemvActivations }),
    ...(qgemvPersistent === undefined ? {} : { qgemvPersistent }),
    ...(qgemvDepth === undefined ? {} : { qgemvDepth }),
    ...(qgemvBlocksPerSm === undefined ? {} : { qgemvBlocksPerSm }),
    ...(attentionSplitTokens === undefined ? {} : { attentionSplitTokens }),
    ...(attentionUnroll === undefined ? {} : { attentionUnroll }),
    ...(dependentLaunch === undefined ? {} : { dependentLaunch: dependentLaunch === '1' }),
  };
}
