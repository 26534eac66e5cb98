import { describe, expect, it } from 'vitest';
import { dawnToggles } from './dawn.js';

describe('dawnToggles', () => {
  it('enables f16 on NVIDIA, leaves buffers mapped at creation unzeroed and disables timestamp quantization by default', () => {
    expect(dawnToggles({})).toEqual({
      enable: ['vulkan_enable_f16_on_nvidia', 'disable_lazy_clear_for_mapped_at_creation_buffer'],
      disable: ['timestamp_quantization'],
    });
    expect(
      dawnToggles({ disableToggles: ['disable_lazy_clear_for_mapped_at_creation_buffer'] }).enable,
    ).toEqual(['vulkan_enable_f16_on_nvidia']);
  });

  it('leaves f16 on NVIDIA off when asked, by option or by disabling the toggle', () => {
    expect(dawnToggles({ f16OnNvidia: false }).enable).not.toContain('vulkan_enable_f16_on_nvidia');
    const viaDisable = dawnToggles({ disableToggles: ['vulkan_enable_f16_on_nvidia'] });
    expect(viaDisable.enable).not.toContain('vulkan_enable_f16_on_nvidia');
    expect(viaDisable.disable).toContain('vulkan_enable_f16_on_nvidia');
    expect(
      dawnToggles({ f16OnNvidia: false, enableToggles: ['vulkan_enable_f16_on_nvidia'] }).enable,
    ).not.toContain('vulkan_enable_f16_on_nvidia');
  });

  it('allows unsafe APIs by option only, and keeps given toggles', () => {
    expect(dawnToggles({ unsafeApis: true }).enable).toContain('allow_unsafe_apis');
    expect(dawnToggles({}).enable).not.toContain('allow_unsafe_apis');
    expect(dawnToggles({ unsafeApis: false }).enable).not.toContain('allow_unsafe_apis');
    expect(dawnToggles({ robustness: false }).enable).toContain('disable_robustness');
    expect(dawnToggles({ robustness: true }).enable).not.toContain('disable_robustness');
    expect(dawnToggles({ unsafeApis: true }).enable).not.toContain('disable_robustness');
    expect(dawnToggles({ enableToggles: ['dump_shaders'] }).enable).toEqual([
      'dump_shaders',
      'vulkan_enable_f16_on_nvidia',
      'disable_lazy_clear_for_mapped_at_creation_buffer',
    ]);
  });
});
