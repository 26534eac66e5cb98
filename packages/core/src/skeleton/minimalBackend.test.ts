import { describe, expect, it } from 'vitest';
import type { BackendInfo, Tensor } from '../backend.js';
import { DisposedTensorError, UnsupportedOnBackendError } from '../errors.js';
import type { AttrValues, KernelSpec } from '../kernel.js';
import { KernelTable, type PreparedCall } from '../kernelCall.js';
import { relu, scale } from '../kernels/index.js';
import { BackendSkeleton } from './backendSkeleton.js';
import type { DeviceStorage } from './deviceStorage.js';

// The example of the README's "Writing a backend": a backend whose memory is
// Float32Arrays and whose one kernel is `scale`. Everything else (checks,
// statistics, liveness, batches, the weight cache) is the skeleton's.

/** A kernel of this backend: its spec, and a function from input arrays to output arrays. */
interface ArrayKernel {
  readonly spec: KernelSpec<AttrValues>;
  readonly run: (inputs: Float32Array[], outputs: Float32Array[], attrs: AttrValues) => void;
}

const KERNELS: ArrayKernel[] = [
  {
    spec: scale as KernelSpec<AttrValues>,
    run: ([x], [y], { alpha, beta }) => {
      for (let i = 0; i < y!.length; i++) y![i] = (alpha as number) * x![i]! + (beta as number);
    },
  },
];

type ArrayCall = PreparedCall<ArrayKernel, AttrValues> & { readonly execute: () => void };

class ArrayBackend extends BackendSkeleton<Float32Array, ArrayKernel, ArrayCall> {
  readonly name = 'array';
  readonly info: BackendInfo = {
    name: 'array',
    device: 'Float32Arrays',
    kind: 'cpu',
    limits: { maxBufferBytes: 2 ** 30 },
    features: [],
  };

  constructor() {
    super(new KernelTable('array', 'JavaScript', KERNELS));
  }

  protected allocateBuffer(_api: string, byteLength: number): Float32Array {
    return new Float32Array(byteLength / 4);
  }
  protected freeBuffer(): void {}
  protected writeStorage(storage: DeviceStorage<Float32Array>, host: Float32Array): void {
    storage.buffer.set(host);
  }
  protected async readStorage(_tensor: Tensor, storage: DeviceStorage<Float32Array>): Promise<Float32Array> {
    return storage.buffer.slice();
  }
  protected clearStorage(_tensor: Tensor, storage: DeviceStorage<Float32Array>): void {
    storage.buffer.fill(0);
  }
  protected encodeCall<A extends AttrValues>(
    call: PreparedCall<ArrayKernel, A>,
    _spec: KernelSpec<A>,
    inputs: readonly (Tensor | undefined)[],
  ): ArrayCall {
    const arrayOf = (t: Tensor) => t.storage<DeviceStorage<Float32Array>>().buffer;
    const execute = () =>
      call.implementation.run(
        inputs.map((t) => arrayOf(t!)),
        call.outputs.map(arrayOf),
        call.attrs,
      );
    return { ...call, execute };
  }
  protected submitCall(call: ArrayCall): void {
    call.execute();
  }
  sync(): Promise<void> {
    return Promise.resolve();
  }
}

describe('a minimal backend on the skeleton', () => {
  it('runs its kernel eagerly and in a batch, with validation, statistics and lifecycle from the skeleton', async () => {
    const backend = new ArrayBackend();
    expect(backend.supports('scale')).toBe(true);
    expect(backend.supports('relu')).toBe(false);
    const x = backend.upload([1, 2, 3], [3]);
    const [y] = backend.run(scale, [x], { alpha: 2, beta: 1 });
    expect(Array.from(await y!.read())).toEqual([3, 5, 7]);

    const batch = backend.batch();
    const [z] = batch.run(scale, [y!], { alpha: 10 });
    await batch.submit();
    expect(Array.from(await z!.read())).toEqual([30, 50, 70]);
    expect(backend.memory()).toMatchObject({ liveTensors: 3, liveBytes: 36, allocations: 3 });

    expect(() => backend.run(relu, [x])).toThrow(UnsupportedOnBackendError);
    expect(() => backend.run(scale, [x], { alpha: 1 }, { out: [backend.zeros([4])] })).toThrow(
      expect.objectContaining({ operation: 'scale', argument: 'out[0]' }),
    );
    x.dispose();
    await expect(backend.read(x)).rejects.toThrow(DisposedTensorError);
    backend.dispose();
    expect(() => backend.empty([1])).toThrow(/backend was disposed/);
  });
});
