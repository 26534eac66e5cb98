// The WebGPU types this package's declarations name, as the program sees
// them: where it has WebGPU's global types (`@webgpu/types`, which
// `@rayo/wgpu/webgpu-types` brings in), each is the real one; elsewhere (a
// Node-only tsconfig: no DOM, whose names `@webgpu/types` needs) it is
// `unknown`, so that importing `@rayo/wgpu` never requires them. A module
// imports these under the global names it uses in its exported declarations.

/** The global class `name` of WebGPU's types, or unknown where the program lacks them. */
type WebGpuClass<Name extends string> =
  typeof globalThis extends Record<Name, { prototype: infer T }> ? T : unknown;

export type GPU = WebGpuClass<'GPU'>;
export type GPUAdapterInfo = WebGpuClass<'GPUAdapterInfo'>;
export type GPUBindGroup = WebGpuClass<'GPUBindGroup'>;
export type GPUBindGroupLayout = WebGpuClass<'GPUBindGroupLayout'>;
export type GPUBuffer = WebGpuClass<'GPUBuffer'>;
export type GPUCommandBuffer = WebGpuClass<'GPUCommandBuffer'>;
export type GPUCommandEncoder = WebGpuClass<'GPUCommandEncoder'>;
export type GPUComputePipeline = WebGpuClass<'GPUComputePipeline'>;
export type GPUDevice = WebGpuClass<'GPUDevice'>;
export type GPUError = WebGpuClass<'GPUError'>;
export type GPUQuerySet = WebGpuClass<'GPUQuerySet'>;
export type GPUQueue = WebGpuClass<'GPUQueue'>;
export type GPUSupportedLimits = WebGpuClass<'GPUSupportedLimits'>;

// WebGPU's dictionaries and enums have no global value to look them up by:
// these are their shapes, as far as this package uses them.

export type GPUPowerPreference = 'low-power' | 'high-performance';
export type GPUBufferUsageFlags = number;
/** The names of GPUBufferUsage's flags. */
export type GPUBufferUsageName =
  | 'MAP_READ'
  | 'MAP_WRITE'
  | 'COPY_SRC'
  | 'COPY_DST'
  | 'INDEX'
  | 'VERTEX'
  | 'UNIFORM'
  | 'STORAGE'
  | 'INDIRECT'
  | 'QUERY_RESOLVE';

export interface GPUBufferBinding {
  buffer: GPUBuffer;
  offset?: number;
  size?: number;
}

export interface GPUBufferDescriptor {
  label?: string;
  size: number;
  usage: GPUBufferUsageFlags;
  mappedAtCreation?: boolean;
}
