import { InvalidArgumentError } from '@rayo/core';
import { describe, expect, it } from 'vitest';
import { wgpuOptionsFromEnvironment } from './environment.js';
import { backendProvider } from './index.js';
import { resolveWgpuTuning } from './tuning.js';

describe('wgpu options from the environment', () => {
  it('name the tuning switches and unsafe APIs, and nothing for unset or empty variables', () => {
    expect(wgpuOptionsFromEnvironment({})).toEqual({});
    expect(
      wgpuOptionsFromEnvironment({
        RAYO_QGEMV_VARIANT: 'b',
        RAYO_QGEMV_SLICES: '2',
        RAYO_WGPU_F16_GEMM: 'widen',
        RAYO_WGPU_UNSAFE_APIS: '1',
      }),
    ).toEqual({ qgemvVariant: 'b', qgemvSlices: 2, f16Gemm: 'widen', unsafeApis: true });
    expect(wgpuOptionsFromEnvironment({ RAYO_WGPU_UNSAFE_APIS: '0', RAYO_WGPU_F16_GEMM: '' })).toEqual({
      unsafeApis: false,
    });
    expect(
      wgpuOptionsFromEnvironment({
        RAYO_DAWN_ENABLE: 'skip_validation, disable_robustness',
        RAYO_DAWN_DISABLE: '',
      }),
    ).toEqual({ enableToggles: ['skip_validation', 'disable_robustness'] });
    expect(wgpuOptionsFromEnvironment({ RAYO_DAWN_DISABLE: 'lazy_clear_resource_on_first_use' })).toEqual({
      disableToggles: ['lazy_clear_resource_on_first_use'],
    });
    expect(backendProvider.optionsFromEnvironment?.({ RAYO_WGPU_F16_GEMM: 'emulated' })).toEqual({
      f16Gemm: 'emulated',
    });
    expect(wgpuOptionsFromEnvironment({ RAYO_WGPU_F16_ATTENTION: 'matrix' })).toEqual({
      f16Attention: 'matrix',
    });
    expect(wgpuOptionsFromEnvironment({ RAYO_WGPU_F16_GEMM_TILE: '128x128w2x2' })).toEqual({
      f16GemmTile: '128x128w2x2',
    });
    expect(wgpuOptionsFromEnvironment({ RAYO_WGPU_F16_ATTENTION_TILE: '8x32' })).toEqual({
      f16AttentionTile: '8x32',
    });
    expect(wgpuOptionsFromEnvironment({ RAYO_WGPU_FUSED_COLUMNS: '4' })).toEqual({ fusedColumns: 4 });
    expect(wgpuOptionsFromEnvironment({ RAYO_WGPU_QUANT_RESIDENT: 'off' })).toEqual({ quantResident: 'off' });
    expect(wgpuOptionsFromEnvironment({ RAYO_WGPU_QUANT_RESIDENT_WORKGROUPS: '512' })).toEqual({
      quantResidentWorkgroups: 512,
    });
    expect(wgpuOptionsFromEnvironment({ RAYO_WGPU_QUANT_PAIR_COLUMNS: '2' })).toEqual({
      quantPairColumns: 2,
    });
    expect(wgpuOptionsFromEnvironment({ RAYO_WGPU_QUANT_COLUMNS: '2' })).toEqual({ quantColumns: 2 });
    expect(wgpuOptionsFromEnvironment({ RAYO_QGEMV_ACTIVATIONS: 'f32' })).toEqual({
      qgemvActivations: 'f32',
    });
    expect(wgpuOptionsFromEnvironment({ RAYO_WGPU_ATTENTION_CHUNK: '64' })).toEqual({ attentionChunk: 64 });
  });

  it('refuse a value that names no choice, naming the variable', () => {
    expect(() => wgpuOptionsFromEnvironment({ RAYO_WGPU_F16_GEMM: 'tensor' })).toThrow(InvalidArgumentError);
    expect(() => wgpuOptionsFromEnvironment({ RAYO_WGPU_F16_GEMM: 'tensor' })).toThrow(
      /RAYO_WGPU_F16_GEMM'.*expected subgroup-matrix \| emulated \| widen, got 'tensor'/,
    );
    expect(() => wgpuOptionsFromEnvironment({ RAYO_WGPU_F16_ATTENTION: 'on' })).toThrow(
      /RAYO_WGPU_F16_ATTENTION'.*expected matrix \| f32, got 'on'/,
    );
    expect(() => wgpuOptionsFromEnvironment({ RAYO_WGPU_F16_GEMM_TILE: '256x256w4x4' })).toThrow(
      /RAYO_WGPU_F16_GEMM_TILE'.*expected 128x128w2x4 \| .*got '256x256w4x4'/,
    );
    expect(() => wgpuOptionsFromEnvironment({ RAYO_WGPU_FUSED_COLUMNS: '3' })).toThrow(
      /RAYO_WGPU_FUSED_COLUMNS'.*expected 1 \| 2 \| 4, got '3'/,
    );
    expect(() => wgpuOptionsFromEnvironment({ RAYO_WGPU_UNSAFE_APIS: 'yes' })).toThrow(
      /RAYO_WGPU_UNSAFE_APIS/,
    );
    expect(() => wgpuOptionsFromEnvironment({ RAYO_DAWN_ENABLE: 'skip_validation;rm -rf' })).toThrow(
      /RAYO_DAWN_ENABLE.*expected comma-separated toggle names.*got 'skip_validation;rm -rf'/,
    );
  });

  it('give options the backend checks when it is created', () => {
    expect(resolveWgpuTuning({ f16Gemm: 'emulated' }).f16Gemm).toBe('emulated');
    expect(resolveWgpuTuning({}).f16Attention).toBeUndefined();
    const mode = { f16Gemm: 'fast' } as unknown as { f16Gemm: 'widen' };
    expect(() => resolveWgpuTuning(mode)).toThrow(/WgpuBackend\.create: argument 'f16Gemm'.*got 'fast'/);
  });
});
