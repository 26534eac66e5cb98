import { type BackendProvider, registerBackend } from '@rayo/core';
import { WgpuBackend, type WgpuBackendOptions } from './backend.js';
import { requestWgpuDevice } from './device.js';
import { wgpuOptionsFromEnvironment } from './environment.js';
import { WGPU_OPTION_KEYS } from './options.js';
import { onSlowPipelineCompile } from './slowCompiles.js';

// Types `createBackend('wgpu', options)` for every program that imports this package.
declare module '@rayo/core' {
  interface BackendOptionsMap {
    wgpu: WgpuBackendOptions;
  }
}

export { WgpuBackend, type WgpuBackendOptions, type WgpuObjectCounts } from './backend.js';
export { requestWgpuDevice, type WgpuDevice, type WgpuDeviceOptions } from './device.js';
export { type WgpuEnvironmentOptions, wgpuOptionsFromEnvironment } from './environment.js';
export type { KernelEncoder, Operand, WgpuKernel } from './kernel.js';
export { WGPU_KERNELS } from './kernels/index.js';
export { PipelineCache, type PipelineStats, type ShaderText } from './pipelines.js';
export {
  onSlowPipelineCompile,
  SLOW_PIPELINE_COMPILE_MS,
  type SlowPipelineCompile,
  type SlowPipelineCompileHandler,
  warnOnceOfSlowCompiles,
} from './slowCompiles.js';
export {
  DEFAULT_WGPU_TUNING,
  F16_ATTENTION_MODES,
  type F16AttentionMode,
  HALF_GEMM_MODES,
  type HalfGemmMode,
  resolveWgpuTuning,
  type WgpuTuning,
  type WgpuTuningOptions,
} from './tuning.js';

/** Creates the WebGPU backend (Dawn in Node, navigator.gpu in browsers). */
export function createWgpuBackend(options?: WgpuBackendOptions): Promise<WgpuBackend> {
  return WgpuBackend.create(options);
}

/** How `createBackend('wgpu')` finds and probes this backend. */
export const backendProvider: BackendProvider = {
  name: 'wgpu',
  async probe() {
    try {
      const gpu = await requestWgpuDevice();
      gpu.device.destroy();
      gpu.gpu = undefined;
      return undefined;
    } catch (error) {
      return (error as Error).message;
    }
  },
  create: (options) => WgpuBackend.create(options as WgpuBackendOptions | undefined),
  optionKeys: WGPU_OPTION_KEYS,
  optionsFromEnvironment: (env) => ({ ...wgpuOptionsFromEnvironment(env) }),
  onSlowCompile: onSlowPipelineCompile,
};

// Importing the package registers the backend, so that `createBackend('wgpu')`
// finds it in a bundle or a browser, where nothing is looked for on disk (a
// program's own registration of 'wgpu' wins over this one). The package.json
// marks this file as having side effects, so bundlers keep a bare
// `import '@rayo/wgpu'`.
registerBackend(backendProvider, { replace: false });
