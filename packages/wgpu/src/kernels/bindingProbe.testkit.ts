import { WgpuBackend } from '../backend.js';

/**
 * A wgpu backend whose storage bindings are forced down to `limit` bytes,
 * noting the shader key of every pipeline its dispatches take and the
 * largest range any bind group binds: what the tests of weights split into
 * binding-sized pieces check.
 */
export class BindingProbe {
  readonly dispatched: string[] = [];
  largestBinding = 0;

  private constructor(readonly gpu: WgpuBackend) {
    const get = gpu.pipelines.get.bind(gpu.pipelines);
    gpu.pipelines.get = (source) => {
      this.dispatched.push(source.key);
      return get(source);
    };
    const createBindGroup = gpu.device.createBindGroup.bind(gpu.device);
    gpu.device.createBindGroup = (descriptor) => {
      for (const entry of descriptor.entries) {
        const size = (entry.resource as { size?: number }).size ?? 0;
        this.largestBinding = Math.max(this.largestBinding, size);
      }
      return createBindGroup(descriptor);
    };
  }

  static async create(limit: number): Promise<BindingProbe> {
    return new BindingProbe(await WgpuBackend.create({ maxBindingBytes: limit }));
  }

  /** Forgets the dispatches and bindings seen so far. */
  reset(): void {
    this.dispatched.length = 0;
    this.largestBinding = 0;
  }
}
