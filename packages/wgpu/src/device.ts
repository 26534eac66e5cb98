import { type BackendInfo, BackendUnavailableError, DeviceLostError } from '@rayo/core';
import { dawnGpu } from '#dawn';
import type { DawnOptions } from './dawn.js';
import { lossRace } from './lossRace.js';
import type { GPU, GPUAdapterInfo, GPUDevice, GPUError, GPUPowerPreference } from './webgpuTypes.js';

export interface WgpuDeviceOptions extends DawnOptions {
  readonly powerPreference?: GPUPowerPreference;
  /** Prefer an adapter whose description, vendor or architecture contains this text. */
  readonly adapter?: string;
  /**
   * Optional features not to request even where the adapter has them, e.g.
   * `subgroups` to run the kernels' fallbacks.
   */
  readonly withoutFeatures?: readonly string[];
  /** An existing device to use instead of requesting one (e.g. from an application). */
  readonly device?: GPUDevice;
}

export interface WgpuDevice {
  /**
   * The GPU entry point. Dawn's instance lives as long as this is referenced,
   * so it is kept here for the device's lifetime.
   */
  gpu: GPU | undefined;
  readonly device: GPUDevice;
  readonly adapterInfo: GPUAdapterInfo | undefined;
  readonly features: ReadonlySet<string>;
  /**
   * The subgroup-matrix shapes the adapter lists (empty without the
   * `chromium-experimental-subgroup-matrix` feature on the device).
   */
  readonly subgroupMatrixConfigs: readonly SubgroupMatrixConfig[];
  /** The adapter's subgroup sizes (0 where it does not say). */
  readonly subgroupSizes: { readonly min: number; readonly max: number };
  /** Rejects with a DeviceLostError when the device is lost. */
  readonly lost: Promise<never>;
  /** `work`, or a DeviceLostError as soon as the device is lost (see lossRace). */
  readonly untilLost: <T>(work: Promise<T>) => Promise<T>;
  /** Set once the device is lost. */
  readonly lostError: () => DeviceLostError | undefined;
  /** Takes the validation or out-of-memory errors the device reported since the last call. */
  readonly takeErrors: () => GPUError[];
}

/** One subgroup-matrix configuration: left M×K, right K×N, result M×N. */
export interface SubgroupMatrixConfig {
  readonly componentType: string;
  readonly resultComponentType: string;
  readonly M: number;
  readonly N: number;
  readonly K: number;
}

/** The configurations of `info.subgroupMatrixConfigs` (absent in older WebGPU implementations). */
function subgroupMatrixConfigsOf(info: GPUAdapterInfo | undefined): SubgroupMatrixConfig[] {
  const list = (info as { subgroupMatrixConfigs?: Iterable<SubgroupMatrixConfig> } | undefined)
    ?.subgroupMatrixConfigs;
  if (!list) return [];
  return [...list].map((c) => ({
    componentType: String(c.componentType),
    resultComponentType: String(c.resultComponentType),
    M: Number(c.M),
    N: Number(c.N),
    K: Number(c.K),
  }));
}

const MAX_KEPT_ERRORS = 64;

// Features rayo uses when the adapter has them.
const WANTED_FEATURES = [
  'shader-f16',
  'subgroups',
  'timestamp-query',
  'chromium-experimental-subgroup-matrix',
];

// Limits raised to the adapter's own maximum: large operands, big workgroups.
const RAISED_LIMITS = [
  'maxStorageBufferBindingSize',
  'maxBufferSize',
  'maxComputeWorkgroupStorageSize',
  'maxComputeInvocationsPerWorkgroup',
  'maxComputeWorkgroupSizeX',
  'maxComputeWorkgroupSizeY',
  'maxComputeWorkgroupSizeZ',
  'maxComputeWorkgroupsPerDimension',
  'maxStorageBuffersPerShaderStage',
] as const;

function describeAdapter(info: GPUAdapterInfo | undefined): string {
  if (!info) return 'unknown adapter';
  return (
    [info.description, info.vendor, info.architecture, info.device].filter(Boolean).join(' / ') ||
    'unnamed adapter'
  );
}

/**
 * Finds a WebGPU adapter and device — Dawn's `webgpu` package in Node,
 * `navigator.gpu` in browsers — with the adapter's own limits and the
 * optional features rayo uses. Throws BackendUnavailableError saying why when
 * there is none.
 */
export async function requestWgpuDevice(options: WgpuDeviceOptions = {}): Promise<WgpuDevice> {
  let device = options.device;
  let adapterInfo: GPUAdapterInfo | undefined;
  let gpu: GPU | undefined;
  if (!device) {
    const browserGpu = (globalThis as { navigator?: { gpu?: GPU } }).navigator?.gpu;
    gpu = browserGpu ?? (await dawnGpu(options));
    const adapter = await gpu.requestAdapter(
      options.powerPreference ? { powerPreference: options.powerPreference } : undefined,
    );
    if (!adapter) {
      throw new BackendUnavailableError(
        'no WebGPU adapter: the system has no usable Vulkan, Metal or D3D12 driver (on Linux without a GPU, install Mesa lavapipe)',
      );
    }
    adapterInfo = adapter.info;
    if (
      options.adapter &&
      !describeAdapter(adapterInfo).toLowerCase().includes(options.adapter.toLowerCase())
    ) {
      throw new BackendUnavailableError(
        `the WebGPU adapter is ${describeAdapter(adapterInfo)}, which does not match '${options.adapter}'`,
      );
    }
    const requiredFeatures = WANTED_FEATURES.filter(
      (f) => adapter.features.has(f) && !options.withoutFeatures?.includes(f),
    ) as GPUFeatureName[];
    const requiredLimits: Record<string, number> = {};
    for (const name of RAISED_LIMITS) {
      const value = adapter.limits[name];
      if (typeof value === 'number') requiredLimits[name] = value;
    }
    try {
      device = await adapter.requestDevice({ requiredFeatures, requiredLimits });
    } catch (error) {
      throw new BackendUnavailableError(
        `the WebGPU adapter ${describeAdapter(adapterInfo)} refused a device: ${(error as Error).message}`,
        { cause: error },
      );
    }
  } else {
    adapterInfo = device.adapterInfo;
  }
  const features = new Set([...device.features].map(String));
  const sizes = adapterInfo as { subgroupMinSize?: number; subgroupMaxSize?: number } | undefined;
  let lostError: DeviceLostError | undefined;
  const lost = device.lost.then((info) => {
    lostError = new DeviceLostError(`WebGPU device lost (${info.reason}): ${info.message}`);
    throw lostError;
  });
  // Nobody may be waiting on `lost`; it must not become an unhandled rejection.
  lost.catch(() => {});
  // Errors outside an error scope are kept for the next sync or read to throw
  // as RayoErrors; preventDefault keeps Dawn from printing them as well.
  const errors: GPUError[] = [];
  device.addEventListener('uncapturederror', (event) => {
    event.preventDefault();
    // Work that nobody syncs on must not grow this without bound.
    if (errors.length < MAX_KEPT_ERRORS) errors.push((event as GPUUncapturedErrorEvent).error);
  });
  return {
    gpu,
    device,
    adapterInfo,
    features,
    subgroupMatrixConfigs: features.has('chromium-experimental-subgroup-matrix')
      ? subgroupMatrixConfigsOf(adapterInfo)
      : [],
    subgroupSizes: { min: sizes?.subgroupMinSize ?? 0, max: sizes?.subgroupMaxSize ?? 0 },
    lost,
    untilLost: lossRace(lost),
    lostError: () => lostError,
    takeErrors: () => errors.splice(0),
  };
}

export { describeAdapter };

/** The backend info of a WebGPU device. */
export function wgpuBackendInfo(gpu: WgpuDevice): BackendInfo {
  return {
    name: 'wgpu',
    device: describeAdapter(gpu.adapterInfo),
    kind: 'gpu',
    limits: { maxBufferBytes: gpu.device.limits.maxBufferSize },
    features: [...gpu.features].sort(),
  };
}
