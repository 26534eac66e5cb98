import { bytesPerElement, type ScratchArena } from '@rayo/core';
import type { Dispatch, KernelEncoder, Operand, SubgroupMatrixSupport } from './kernel.js';
import type { ParamSlots } from './params.js';
import type { PipelineCache } from './pipelines.js';
import type { WgpuTuning } from './tuning.js';
import type {
  GPUBindGroup,
  GPUBuffer,
  GPUCommandBuffer,
  GPUCommandEncoder,
  GPUComputePipeline,
  GPUDevice,
  GPUQuerySet,
  GPUSupportedLimits,
} from './webgpuTypes.js';

function binding(b: Operand | GPUBufferBinding): GPUBufferBinding {
  if ('shape' in b) {
    // Bindings must be non-empty and a multiple of 4 bytes.
    const bytes = Math.max(4, Math.ceil((b.size * bytesPerElement(b.dtype)) / 4) * 4);
    return { buffer: b.buffer, offset: b.offset, size: bytes };
  }
  return b;
}

/** A dispatch with everything resolved to GPU objects, ready to replay. */
interface RecordedDispatch {
  readonly pipeline: GPUComputePipeline;
  readonly group: GPUBindGroup;
  readonly x: number;
  readonly y: number;
  readonly z: number;
}

/** Work outside compute passes (copies, timestamps) is kept as a closure over the encoder. */
type RecordedCommand = RecordedDispatch | ((encoder: GPUCommandEncoder) => void);

/**
 * Recorded commands with their bind groups, parameter slots and scratch
 * arena. Encoding it again creates no bind groups, as long as it gets the
 * same parameter chunks and scratch buffers back (`reclaim`).
 */
export class Recording {
  constructor(
    private readonly commands: readonly RecordedCommand[],
    readonly params: ParamSlots,
    private readonly scratch: ScratchArena<GPUBuffer>,
    /** Bind groups created while recording. */
    readonly bindGroups: number,
  ) {}

  /** One command buffer: consecutive dispatches share one compute pass, redundant pipeline changes are left out. */
  encode(device: GPUDevice): GPUCommandBuffer {
    return this.#encodeRange(device, 0, this.commands.length);
  }

  /**
   * Encodes and submits the commands in parts of growing size (`firstPart`
   * commands, then twice as many each time), each submitted as soon as it is
   * encoded. Dawn turns a command buffer into Vulkan commands inside
   * `queue.submit` and the GPU starts only after that: in parts, the GPU runs
   * the first part while the host encodes the next, instead of waiting for
   * all of it. Queue order keeps the parts in sequence. Returns the number
   * of command buffers.
   */
  submitInParts(device: GPUDevice, firstPart: number): number {
    const n = this.commands.length;
    let parts = 0;
    let size = Math.max(1, firstPart);
    for (let from = 0; from < n; from += size, size *= 2, parts++) {
      device.queue.submit([this.#encodeRange(device, from, Math.min(n, from + size))]);
    }
    return parts;
  }

  #encodeRange(device: GPUDevice, from: number, to: number): GPUCommandBuffer {
    const encoder = device.createCommandEncoder();
    let pass: GPUComputePassEncoder | undefined;
    let pipeline: GPUComputePipeline | undefined;
    for (let i = from; i < to; i++) {
      const c = this.commands[i]!;
      if (typeof c === 'function') {
        pass?.end();
        pass = undefined;
        c(encoder);
        continue;
      }
      if (!pass) {
        pass = encoder.beginComputePass();
        pipeline = undefined;
      }
      if (c.pipeline !== pipeline) {
        pipeline = c.pipeline;
        pass.setPipeline(pipeline);
      }
      pass.setBindGroup(0, c.group);
      // Each call crosses into native code; the one-argument form is the cheapest.
      if (c.y === 1 && c.z === 1) pass.dispatchWorkgroups(c.x);
      else pass.dispatchWorkgroups(c.x, c.y, c.z);
    }
    pass?.end();
    return encoder.finish();
  }

  /** Submissions of this recording that the GPU has not finished. */
  #inFlight = 0;

  /**
   * Takes its parameter chunks and scratch buffers back for a replay; false
   * if another recording uses one. While an earlier submission of this
   * recording is in flight they are still its own: queue order runs the two
   * one after the other, as it does the dispatches inside one.
   */
  reclaim(): boolean {
    if (this.#inFlight > 0) return true;
    if (!this.params.reclaim()) return false;
    if (this.scratch.reclaim()) return true;
    this.params.release();
    return false;
  }

  /** Counts a submission, until `release` when the GPU finished it. */
  submitted(): void {
    this.#inFlight++;
  }

  /**
   * A submission finished (or the recording was never submitted): with none
   * left in flight, returns the parameter chunks and scratch buffers to
   * their pools.
   */
  release(): void {
    if (this.#inFlight > 0 && --this.#inFlight > 0) return;
    this.params.release();
    this.scratch.release();
  }
}

/**
 * The encoder kernels record into: resolves each dispatch to a pipeline and
 * a bind group once, for a `Recording` to encode (and replay).
 */
export class CommandRecorder implements KernelEncoder {
  readonly #commands: RecordedCommand[] = [];
  #bindGroups = 0;

  constructor(
    readonly device: GPUDevice,
    readonly features: ReadonlySet<string>,
    private readonly pipelines: PipelineCache,
    private readonly params: ParamSlots,
    /** Scratch buffers, reused by the recorded calls in turn. */
    private readonly scratchArena: ScratchArena<GPUBuffer>,
    readonly maxBindingBytes: number,
    readonly tuning: WgpuTuning,
    readonly subgroupMatrix?: SubgroupMatrixSupport,
  ) {}

  get limits(): GPUSupportedLimits {
    return this.device.limits;
  }

  dispatch<K extends string>(d: Dispatch<K>): void {
    const { pipeline, layout } = this.pipelines.get(d.shader);
    const entries: GPUBindGroupEntry[] = d.buffers.map((b, i) => ({ binding: i, resource: binding(b) }));
    if (d.params)
      entries.push({ binding: entries.length, resource: this.params.put(d.params.layout, d.params.values) });
    const group = this.device.createBindGroup({ layout, entries });
    this.#bindGroups++;
    const [x, y = 1, z = 1] = d.workgroups;
    this.#commands.push({ pipeline, group, x, y, z });
  }

  copy(src: GPUBuffer, srcOffset: number, dst: GPUBuffer, dstOffset: number, bytes: number): void {
    if (bytes > 0) this.#commands.push((e) => e.copyBufferToBuffer(src, srcOffset, dst, dstOffset, bytes));
  }

  scratch(bytes: number): GPUBuffer {
    return this.scratchArena.take(bytes);
  }

  /** The next kernel call starts: its scratch reuses the buffers of the calls before it (they run first). */
  beginCall(): void {
    this.scratchArena.beginCall();
  }

  /** Writes a device timestamp into `querySet[index]` at this point of the recording. */
  timestamp(querySet: GPUQuerySet, index: number): void {
    // An empty pass whose only job is its timestamp.
    this.#commands.push((e) =>
      e.beginComputePass({ timestampWrites: { querySet, beginningOfPassWriteIndex: index } }).end(),
    );
  }

  /** Other commands at this point of the recording, for the backend's own use (query resolves, readbacks). */
  encodeDirect(command: (encoder: GPUCommandEncoder) => void): void {
    this.#commands.push(command);
  }

  /** Ends recording. */
  finish(): Recording {
    return new Recording(this.#commands, this.params, this.scratchArena, this.#bindGroups);
  }

  /** Gives back what recording took, after a kernel refused its input halfway. */
  abandon(): void {
    this.finish().release();
  }
}
