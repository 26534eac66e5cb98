import type { CallRecorder, KernelRunner } from '@rayo/core';
import type { WgpuRecordedCall } from './batch.js';
import type { WgpuQueue } from './queue.js';
import type { GPUBuffer, GPUQuerySet } from './webgpuTypes.js';

/**
 * Device time of recorded work with timestamp queries: the query set and its
 * resolve buffer are made on the first measurement and kept.
 */
export class DeviceTimer {
  #objects: { querySet: GPUQuerySet; resolve: GPUBuffer } | undefined;

  constructor(private readonly queue: WgpuQueue) {}

  /** Milliseconds between timestamps around the kernels `work` runs (recorded through `calls`), submitted together. */
  async measure(
    calls: CallRecorder<WgpuRecordedCall>,
    work: (runner: KernelRunner) => void,
  ): Promise<number> {
    const { device, staging } = this.queue;
    this.#objects ??= {
      querySet: device.createQuerySet({ type: 'timestamp', count: 2 }),
      resolve: device.createBuffer({
        size: 16,
        usage: GPUBufferUsage.QUERY_RESOLVE | GPUBufferUsage.COPY_SRC,
      }),
    };
    const { querySet, resolve } = this.#objects;
    const readback = staging.acquire(16, 'deviceTime');
    await this.queue.submitWork((recorder) => {
      recorder.timestamp(querySet, 0);
      work({
        run: (spec, inputs, attrs, options) => {
          const { outputs, encode } = calls.record(spec, inputs, attrs, options);
          encode(recorder);
          return outputs;
        },
      });
      recorder.timestamp(querySet, 1);
      recorder.encodeDirect((encoder) => {
        encoder.resolveQuerySet(querySet, 0, 2, resolve, 0);
        encoder.copyBufferToBuffer(resolve, 0, readback, 0, 16);
      });
    });
    await this.queue.pipelines.settle();
    await this.queue.deviceWait('deviceTime', readback.mapAsync(GPUMapMode.READ, 0, 16));
    const [begin, end] = new BigUint64Array(readback.getMappedRange(0, 16).slice(0));
    readback.unmap();
    staging.release(readback);
    return Number(end! - begin!) / 1e6;
  }

  dispose(): void {
    this.#objects?.querySet.destroy();
    this.#objects?.resolve.destroy();
  }
}
