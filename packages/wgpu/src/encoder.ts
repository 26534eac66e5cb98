import type { ScratchPool } from './buffers.js';
import type { Dispatch, KernelEncoder, Operand } from './kernel.js';
import type { ParamSlots } from './params.js';
import type { PipelineCache } from './pipelines.js';

function binding(b: Operand | GPUBufferBinding): GPUBufferBinding {
  if ('shape' in b) {
    // Bindings must be non-empty and a multiple of 4 bytes.
    const bytes = Math.max(
      4,
      Math.ceil((b.size * (b.dtype === 'f16' || b.dtype === 'bf16' ? 2 : 4)) / 4) * 4,
    );
    return { buffer: b.buffer, offset: b.offset, size: bytes };
  }
  return b;
}

/**
 * Records kernels into one command encoder, keeping a compute pass open
 * across dispatches and closing it only for copies.
 */
export class CommandRecorder implements KernelEncoder {
  readonly #encoder: GPUCommandEncoder;
  #pass: GPUComputePassEncoder | undefined;
  readonly #scratch: GPUBuffer[] = [];
  dispatches = 0;

  constructor(
    readonly device: GPUDevice,
    readonly features: ReadonlySet<string>,
    private readonly pipelines: PipelineCache,
    private readonly params: ParamSlots,
    private readonly scratchPool: ScratchPool,
    readonly maxBindingBytes: number,
  ) {
    this.#encoder = device.createCommandEncoder();
  }

  get limits(): GPUSupportedLimits {
    return this.device.limits;
  }

  dispatch<K extends string>(d: Dispatch<K>): void {
    const { pipeline, layout } = this.pipelines.get(d.shader);
    const entries: GPUBindGroupEntry[] = d.buffers.map((b, i) => ({ binding: i, resource: binding(b) }));
    if (d.params)
      entries.push({ binding: entries.length, resource: this.params.put(d.params.layout, d.params.values) });
    const group = this.device.createBindGroup({ layout, entries });
    this.#pass ??= this.#encoder.beginComputePass();
    this.#pass.setPipeline(pipeline);
    this.#pass.setBindGroup(0, group);
    const [x, y = 1, z = 1] = d.workgroups;
    this.#pass.dispatchWorkgroups(x, y, z);
    this.dispatches++;
  }

  copy(src: GPUBuffer, srcOffset: number, dst: GPUBuffer, dstOffset: number, bytes: number): void {
    this.#endPass();
    if (bytes > 0) this.#encoder.copyBufferToBuffer(src, srcOffset, dst, dstOffset, bytes);
  }

  scratch(bytes: number): GPUBuffer {
    const buffer = this.scratchPool.acquire(bytes);
    this.#scratch.push(buffer);
    return buffer;
  }

  /** Writes a device timestamp into `querySet[index]` at this point of the recording. */
  timestamp(querySet: GPUQuerySet, index: number): void {
    this.#endPass();
    // An empty pass whose only job is its timestamp.
    this.#encoder.beginComputePass({ timestampWrites: { querySet, beginningOfPassWriteIndex: index } }).end();
  }

  #endPass(): void {
    this.#pass?.end();
    this.#pass = undefined;
  }

  /** Ends recording: the command buffer, and the scratch buffers to release once it ran. */
  finish(): { commands: GPUCommandBuffer; scratch: GPUBuffer[] } {
    this.#endPass();
    return { commands: this.#encoder.finish(), scratch: this.#scratch };
  }

  /** Direct access for the backend's own copies (reads). */
  get encoder(): GPUCommandEncoder {
    this.#endPass();
    return this.#encoder;
  }
}
