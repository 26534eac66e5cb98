import type { BackendInfo, Tensor } from '../backend.js';
import type { BackendProvider } from '../backendProvider.js';
import { allocHost, type DType, type HostArray } from '../dtype.js';
import { OutOfMemoryError, RayoError } from '../errors.js';
import { type AnyKernelSpec, type AttrValues, type KernelSpec, runReference } from '../kernel.js';
import type { PreparedCall } from '../kernelCall.js';
import { kernelByName } from '../kernels/index.js';
import { FLOAT } from '../kernels/vocabulary.js';
import { formatShape, type Shape, sizeOf } from '../shape.js';
import { BackendSkeleton } from '../skeleton/backendSkeleton.js';
import type { DeviceStorage } from '../skeleton/deviceStorage.js';
import { FAST_PATHS, type Impl } from './fastPaths.js';

/** A validated cpu call with the work that computes it. */
type CpuCall = PreparedCall<Impl, AttrValues> & { readonly execute: () => void };

/**
 * The reference backend: plain TypeScript on the host, built from the kernel
 * specs' reference implementations (with a cache-blocked GEMM). It runs
 * anywhere and is the oracle every other backend is tested against. Its
 * buffers are the host arrays themselves, and its work runs when submitted.
 */
export class CpuBackend extends BackendSkeleton<HostArray, Impl, CpuCall> {
  readonly name = 'cpu';
  readonly info: BackendInfo;

  constructor() {
    super();
    const runtime =
      typeof process !== 'undefined' && process.versions?.node
        ? `Node ${process.versions.node}`
        : 'JavaScript';
    this.info = {
      name: 'cpu',
      device: `reference (${runtime})`,
      kind: 'cpu',
      // Typed arrays are indexed by 32-bit offsets in practice; stay well inside.
      limits: { maxBufferBytes: 2 ** 31 },
      features: [],
    };
  }

  // Every reference runs f32, f16 and bf16 storage (`runReference`).
  override supports(kernel: string, _dtype?: DType): boolean {
    return kernelByName(kernel) !== undefined;
  }

  protected allocateBuffer(api: string, byteLength: number, shape: Shape, dtype: DType): HostArray {
    const details = {
      operation: api,
      argument: 'shape',
      expected: `<= ${this.info.limits.maxBufferBytes} bytes (maxBufferBytes)`,
      actual: `${byteLength} bytes for ${dtype}${formatShape(shape)}`,
    };
    if (byteLength > this.info.limits.maxBufferBytes) {
      throw new OutOfMemoryError('the tensor is larger than the cpu backend can allocate', details);
    }
    try {
      return allocHost(dtype, sizeOf(shape));
    } catch (error) {
      // The JavaScript heap refused the array.
      if (error instanceof RangeError) {
        throw new OutOfMemoryError('the host could not allocate the tensor', { ...details, cause: error });
      }
      throw error;
    }
  }

  // The garbage collector takes the array once no tensor holds it.
  protected freeBuffer(): void {}

  // Work runs at submit on this backend, so a plain copy is already in order.
  protected writeStorage(storage: DeviceStorage<HostArray>, host: HostArray): void {
    storage.buffer.set(host);
  }

  protected readStorage(_tensor: Tensor, storage: DeviceStorage<HostArray>): Promise<HostArray> {
    return Promise.resolve(storage.buffer.slice());
  }

  // A new typed array is zeroed.
  protected clearStorage(): void {}

  /** The tensor's host memory itself, without a copy (for cpu-side helpers). */
  hostArrayOf(tensor: Tensor): HostArray {
    return this.own('hostArrayOf', tensor, 'tensor').buffer;
  }

  protected override implementationOf(spec: AnyKernelSpec): Impl {
    return FAST_PATHS[spec.name] ?? spec.reference;
  }

  protected override floatDtypes(): readonly DType[] {
    return FLOAT;
  }

  protected encodeCall<A extends AttrValues>(
    call: PreparedCall<Impl, A>,
    spec: KernelSpec<A>,
    inputs: readonly (Tensor | undefined)[],
  ): CpuCall {
    const { implementation, io, outputs } = call;
    const execute = () => {
      const arrays = inputs.map((t) => (t ? t.storage<DeviceStorage<HostArray>>().buffer : undefined));
      // Every implementation is f32 code: half tensors are widened and rounded around it.
      const results = runReference(spec, arrays, call.attrs, io, implementation);
      if (results.length !== outputs.length) {
        throw new RayoError('implementation returned the wrong number of outputs', {
          operation: spec.name,
          expected: String(outputs.length),
          actual: String(results.length),
        });
      }
      results.forEach((result, i) => {
        const target = outputs[i]!.storage<DeviceStorage<HostArray>>().buffer;
        if (result.length !== target.length) {
          throw new RayoError('implementation returned an output of the wrong size', {
            operation: spec.name,
            argument: io.outputs[i]!.name,
            expected: `${target.length} elements`,
            actual: `${result.length}`,
          });
        }
        target.set(result);
      });
    };
    return { ...call, execute } as CpuCall;
  }

  protected submitCall(call: CpuCall): void {
    call.execute();
  }

  sync(): Promise<void> {
    return Promise.resolve();
  }

  // The buffer of a cpu tensor is exactly its elements: a slice is a subarray.
  protected override bufferAt(
    s: DeviceStorage<HostArray>,
    offset: number,
    length: number,
  ): { buffer: HostArray; offset: number } {
    return { buffer: s.buffer.subarray(offset, offset + length), offset: 0 };
  }

  // A view of the array's first elements: the buffer of a cpu tensor is exactly its elements.
  protected override prefixOf(base: Tensor, shape: Shape): Tensor {
    return this.borrowed(this.hostArrayOf(base).subarray(0, sizeOf(shape)), shape, base.dtype);
  }
}

export function createCpuBackend(): CpuBackend {
  return new CpuBackend();
}

export const cpuBackendProvider: BackendProvider = {
  name: 'cpu',
  // The cpu backend takes no options: any key is refused by name.
  optionKeys: [],
  probe: () => Promise.resolve(undefined),
  create: () => Promise.resolve(new CpuBackend()),
};
