import {
  choiceFromEnvironment,
  type EnvironmentVariables,
  InvalidArgumentError,
  QGEMV_ACTIVATION_CHOICES,
  qgemvOptionsFromEnvironment,
} from '@rayo/core';
import type { DawnOptions } from './dawn.js';
import {
  ATTENTION_CHUNK_CHOICES,
  F16_ATTENTION_MODES,
  F16_ATTENTION_TILE_NAMES,
  FUSED_COLUMN_CHOICES,
  HALF_GEMM_MODES,
  HALF_GEMM_TILE_NAMES,
  QUANT_COLUMN_CHOICES,
  QUANT_PAIR_COLUMN_CHOICES,
  QUANT_RESIDENT_CHOICES,
  QUANT_RESIDENT_WORKGROUP_CHOICES,
  type WgpuTuningOptions,
} from './tuning.js';

const WHERE = 'wgpuOptionsFromEnvironment';

/** What the environment can set: the tuning switches, Dawn's unsafe APIs and its toggles. */
export interface WgpuEnvironmentOptions
  extends WgpuTuningOptions,
    Pick<DawnOptions, 'unsafeApis' | 'enableToggles' | 'disableToggles'> {}

/** A comma-separated list of Dawn toggle names (`skip_validation,disable_robustness`), or undefined when unset. */
function togglesFromEnvironment(env: EnvironmentVariables, name: string): string[] | undefined {
  const text = env[name];
  if (text === undefined || text === '') return undefined;
  const toggles = text.split(',').map((toggle) => toggle.trim());
  for (const toggle of toggles) {
    if (!/^[a-z0-9_]+$/.test(toggle)) {
      throw new InvalidArgumentError(`${name}: not a Dawn toggle name`, {
        operation: WHERE,
        argument: name,
        expected: 'comma-separated toggle names of lower-case letters, digits and underscores',
        actual: `'${text}'`,
      });
    }
  }
  return toggles;
}

/**
 * The backend options that environment variables name, for programs that
 * take them from the environment (the bench and workloads CLIs, through
 * `backendOptionsFromEnvironment('wgpu', process.env)`): RAYO_QGEMV_VARIANT
 * (`a`, `b`, `c`, `d`) → `qgemvVariant`, RAYO_QGEMV_SLICES (1, 2, 4, 8) →
 * `qgemvSlices`, RAYO_WGPU_F16_GEMM (`subgroup-matrix`, `emulated`, `widen`)
 * → `f16Gemm`, RAYO_WGPU_F16_ATTENTION (`matrix`, `f32`) → `f16Attention`,
 * RAYO_WGPU_F16_GEMM_TILE (`128x128w2x4`, … see HALF_GEMM_TILE_NAMES) → `f16GemmTile`,
 * RAYO_WGPU_F16_ATTENTION_TILE (`4x64`, … see F16_ATTENTION_TILE_NAMES) → `f16AttentionTile`,
 * RAYO_WGPU_FUSED_COLUMNS (1, 2, 4) → `fusedColumns`, RAYO_WGPU_QUANT_COLUMNS (1, 2, 4) →
 * `quantColumns`, RAYO_WGPU_QUANT_RESIDENT (`on`, `off`) → `quantResident`, RAYO_WGPU_QUANT_RESIDENT_WORKGROUPS (256, 512, 1024) → `quantResidentWorkgroups`, RAYO_WGPU_QUANT_PAIR_COLUMNS (1, 2) → `quantPairColumns`, RAYO_QGEMV_ACTIVATIONS (`f32`, `int8`) → `qgemvActivations`, RAYO_WGPU_ATTENTION_CHUNK (64, 128, 256) → `attentionChunk`,
 * RAYO_WGPU_UNSAFE_APIS=1 → `unsafeApis: true`, and
 * RAYO_DAWN_ENABLE / RAYO_DAWN_DISABLE (comma-separated Dawn toggles, e.g.
 * `skip_validation`) → `enableToggles` / `disableToggles`; unset or
 * empty variables name nothing. This is the one place the package reads the
 * environment (where there is one: browsers have none): the backend itself
 * never does.
 */
export function wgpuOptionsFromEnvironment(
  env: EnvironmentVariables = globalThis.process?.env ?? {},
): WgpuEnvironmentOptions {
  const f16Gemm = choiceFromEnvironment(env, 'RAYO_WGPU_F16_GEMM', HALF_GEMM_MODES, WHERE);
  const f16Attention = choiceFromEnvironment(env, 'RAYO_WGPU_F16_ATTENTION', F16_ATTENTION_MODES, WHERE);
  const f16GemmTile = choiceFromEnvironment(env, 'RAYO_WGPU_F16_GEMM_TILE', HALF_GEMM_TILE_NAMES, WHERE);
  const f16AttentionTile = choiceFromEnvironment(
    env,
    'RAYO_WGPU_F16_ATTENTION_TILE',
    F16_ATTENTION_TILE_NAMES,
    WHERE,
  );
  const fusedColumns = choiceFromEnvironment(env, 'RAYO_WGPU_FUSED_COLUMNS', FUSED_COLUMN_CHOICES, WHERE);
  const quantColumns = choiceFromEnvironment(env, 'RAYO_WGPU_QUANT_COLUMNS', QUANT_COLUMN_CHOICES, WHERE);
  const quantResident = choiceFromEnvironment(env, 'RAYO_WGPU_QUANT_RESIDENT', QUANT_RESIDENT_CHOICES, WHERE);
  const quantPairColumns = choiceFromEnvironment(
    env,
    'RAYO_WGPU_QUANT_PAIR_COLUMNS',
    QUANT_PAIR_COLUMN_CHOICES,
    WHERE,
  );
  const quantResidentWorkgroups = choiceFromEnvironment(
    env,
    'RAYO_WGPU_QUANT_RESIDENT_WORKGROUPS',
    QUANT_RESIDENT_WORKGROUP_CHOICES,
    WHERE,
  );
  const qgemvActivations = choiceFromEnvironment(
    env,
    'RAYO_QGEMV_ACTIVATIONS',
    QGEMV_ACTIVATION_CHOICES,
    WHERE,
  );
  const attentionChunk = choiceFromEnvironment(
    env,
    'RAYO_WGPU_ATTENTION_CHUNK',
    ATTENTION_CHUNK_CHOICES,
    WHERE,
  );
  const unsafe = choiceFromEnvironment(env, 'RAYO_WGPU_UNSAFE_APIS', ['0', '1'], WHERE);
  const enableToggles = togglesFromEnvironment(env, 'RAYO_DAWN_ENABLE');
  const disableToggles = togglesFromEnvironment(env, 'RAYO_DAWN_DISABLE');
  return {
    ...(enableToggles ? { enableToggles } : {}),
    ...(disableToggles ? { disableToggles } : {}),
    ...qgemvOptionsFromEnvironment(env, WHERE),
    ...(f16Gemm === undefined ? {} : { f16Gemm }),
    ...(f16Attention === undefined ? {} : { f16Attention }),
    ...(f16GemmTile === undefined ? {} : { f16GemmTile }),
    ...(f16AttentionTile === undefined ? {} : { f16AttentionTile }),
    ...(fusedColumns === undefined ? {} : { fusedColumns }),
    ...(quantColumns === undefined ? {} : { quantColumns }),
    ...(quantResident === undefined ? {} : { quantResident }),
    ...(quantResidentWorkgroups === undefined ? {} : { quantResidentWorkgroups }),
    ...(quantPairColumns === undefined ? {} : { quantPairColumns }),
    ...(qgemvActivations === undefined ? {} : { qgemvActivations }),
    ...(attentionChunk === undefined ? {} : { attentionChunk }),
    ...(unsafe === undefined ? {} : { unsafeApis: unsafe === '1' }),
  };
}
