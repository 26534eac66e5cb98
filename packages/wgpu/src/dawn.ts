/**
 * WebGPU in Node: Dawn, from the `webgpu` package (an optional peer
 * dependency: browsers have `navigator.gpu` and never load this file; the
 * `#dawn` import of the package.json gives them `./dawn.browser.js`).
 */
import { BackendUnavailableError } from '@rayo/core';
import type { GPU } from './webgpuTypes.js';

/** The Dawn toggles a device is requested with (part of `WgpuDeviceOptions`; Node only). */
export interface DawnOptions {
  /** Dawn toggles to enable, e.g. `allow_unsafe_apis` (Node only). */
  readonly enableToggles?: readonly string[];
  /** Dawn toggles to disable, e.g. `vulkan_enable_f16_on_nvidia` (Node only). */
  readonly disableToggles?: readonly string[];
  /**
   * In Node, enable Dawn's `vulkan_enable_f16_on_nvidia` toggle (default
   * true): without it Dawn hides `shader-f16` on NVIDIA's Vulkan driver
   * (because of bugs in old drivers); it changes nothing on other adapters.
   * `false` (or the toggle in `disableToggles`) leaves it off.
   */
  readonly f16OnNvidia?: boolean;
  /**
   * In Node, enable Dawn's `allow_unsafe_apis` toggle (default false): it
   * exposes experimental features, among them
   * `chromium-experimental-subgroup-matrix`, which the half matrix products
   * use for their tensor-core path. `wgpuOptionsFromEnvironment` sets it
   * from `RAYO_WGPU_UNSAFE_APIS=1`.
   */
  readonly unsafeApis?: boolean;
  /**
   * In Node, `false` enables Dawn's `disable_robustness` toggle (default
   * true: robustness on): Tint then compiles shaders without clamping every
   * array index. rayo's kernels bound their own reads and writes (the
   * conformance and fuzz suites check them), and the clamps cost the
   * subgroup-matrix kernels up to half their speed on an H200; without them
   * a kernel bug could touch memory outside its buffers. Browsers keep it.
   */
  readonly robustness?: boolean;
}

/** The Dawn toggles to enable and disable for `options` (with rayo's defaults). */
export function dawnToggles(options: DawnOptions): { enable: string[]; disable: string[] } {
  const disable = new Set(['timestamp_quantization', ...(options.disableToggles ?? [])]);
  const enable = new Set(options.enableToggles ?? []);
  // Dawn hides shader-f16 on NVIDIA's Vulkan driver because old drivers had
  // bugs with it; current ones (tested: 580) run rayo's f16 kernels. Only
  // NVIDIA's Vulkan driver reads this toggle.
  if (options.f16OnNvidia !== false && !disable.has(F16_ON_NVIDIA)) enable.add(F16_ON_NVIDIA);
  if (options.f16OnNvidia === false) enable.delete(F16_ON_NVIDIA);
  if (options.unsafeApis) enable.add('allow_unsafe_apis');
  if (options.robustness === false) enable.add('disable_robustness');
  // Buffers mapped at creation (upload staging, constant tables) are filled
  // by rayo before anything reads them, and only the bytes written are ever
  // copied out: zeroing them first only costs time (a 1B model's staging
  // pieces, 256 MiB, took ~50 ms of the load's host time on an H200 host).
  if (!disable.has(NO_CLEAR_MAPPED)) enable.add(NO_CLEAR_MAPPED);
  return { enable: [...enable], disable: [...disable] };
}

const NO_CLEAR_MAPPED = 'disable_lazy_clear_for_mapped_at_creation_buffer';

const F16_ON_NVIDIA = 'vulkan_enable_f16_on_nvidia';

/** Dawn's WebGPU entry point, one instance per set of toggles. */
export async function dawnGpu(options: DawnOptions): Promise<GPU> {
  let webgpu: { create(flags: string[]): GPU; globals: object };
  try {
    webgpu = (await import('webgpu')) as unknown as typeof webgpu;
  } catch (error) {
    const missing = (error as { code?: string }).code === 'ERR_MODULE_NOT_FOUND';
    throw new BackendUnavailableError(
      missing
        ? "the 'webgpu' package (Dawn for Node) is not installed: in Node, @rayo/wgpu needs it beside it " +
            '(npm install webgpu; an optional peer dependency, which browsers do not need)'
        : `the 'webgpu' package (Dawn for Node) could not be loaded: ${(error as Error).message}`,
      { cause: error },
    );
  }
  // Dawn's GPU* classes (GPUBufferUsage, …) must be globals for WebGPU code.
  for (const [name, value] of Object.entries(webgpu.globals)) {
    if (!(name in globalThis))
      Object.defineProperty(globalThis, name, { value, configurable: true, writable: true });
  }
  // Dawn rounds timestamps to 65.5 µs by default (a browser privacy measure);
  // a compute library needs real kernel times: timestamp_quantization is off.
  const { enable, disable } = dawnToggles(options);
  const flags: string[] = [];
  if (enable.length) flags.push(`enable-dawn-features=${enable.join(',')}`);
  flags.push(`disable-dawn-features=${disable.join(',')}`);
  const key = flags.join(' ');
  let gpu = instances.get(key);
  if (!gpu) {
    gpu = webgpu.create(flags);
    instances.set(key, gpu);
  }
  return gpu;
}

// One Dawn instance per set of flags for the whole process: an instance
// collected while another is in use can crash Dawn (seen on lavapipe), and a
// kept instance does not hold the process open once its devices are destroyed.
const instances = new Map<string, GPU>();
