import {
  type Backend,
  type BackendInfo,
  type CommandBatch,
  type MemoryStats,
  type RunOptions,
  Tensor,
  type TensorStorage,
  type WeightCache,
} from '../backend.js';
import type { BackendProvider } from '../backendProvider.js';
import { RecordingBatch } from '../batchCalls.js';
import { allocHost, bytesPerElement, type DType, type HostArray } from '../dtype.js';
import { OutOfMemoryError, RayoError } from '../errors.js';
import { checkShapeAndDType, checkWrite, hostDataFor, ownedStorage } from '../hostData.js';
import { type AttrValues, type KernelIO, type KernelSpec, runReference } from '../kernel.js';
import { type CallSite, type PreparedCall, prepareCall } from '../kernelCall.js';
import {
  batchedMatmul as batchedMatmulSpec,
  copy as copySpec,
  kernelByName,
  matmul as matmulSpec,
} from '../kernels/index.js';
import { FLOAT } from '../kernels/vocabulary.js';
import { checkInputsWritten, checkWritten } from '../pendingWrites.js';
import { formatShape, type Shape, sizeOf } from '../shape.js';
import { DeviceWeightCache } from '../weightCache.js';
import { gemm } from './gemm.js';

type Impl = (inputs: readonly (HostArray | undefined)[], attrs: AttrValues, io: KernelIO) => HostArray[];

// Kernels where the cpu backend is faster than the plain reference; the
// conformance suite checks them against it.
const FAST_PATHS: Readonly<Record<string, Impl>> = {
  [matmulSpec.name]: ([a, b, c], attrs, io) => {
    const [m, n] = io.outputs[0]!.shape as [number, number];
    const aShape = io.inputs[0]!.shape;
    const k = attrs.transA ? aShape[0]! : aShape[1]!;
    return [
      gemm({
        m,
        n,
        k,
        a: a!,
        b: b!,
        c,
        alpha: attrs.alpha as number,
        beta: attrs.beta as number,
        transA: attrs.transA as boolean,
        transB: attrs.transB as boolean,
      }),
    ];
  },
  [batchedMatmulSpec.name]: ([a, b], attrs, io) => {
    const [batch, m, n] = io.outputs[0]!.shape as [number, number, number];
    const aShape = io.inputs[0]!.shape;
    const k = attrs.transA ? aShape[1]! : aShape[2]!;
    const y = new Float32Array(batch * m * n);
    for (let i = 0; i < batch; i++) {
      gemm(
        {
          m,
          n,
          k,
          a: a!.subarray(i * m * k, (i + 1) * m * k),
          b: b!.subarray(i * k * n, (i + 1) * k * n),
          alpha: attrs.alpha as number,
          beta: 0,
          transA: attrs.transA as boolean,
          transB: attrs.transB as boolean,
        },
        y.subarray(i * m * n, (i + 1) * m * n),
      );
    }
    return [y];
  },
};

class CpuStorage implements TensorStorage {
  #freed = false;
  /** `stats` is absent for views, which borrow another tensor's memory. */
  constructor(
    readonly data: HostArray,
    private readonly stats: MutableStats | undefined,
  ) {
    stats?.allocate(data.byteLength);
  }
  get byteLength(): number {
    return this.data.byteLength;
  }
  free(): void {
    if (this.#freed) return;
    this.#freed = true;
    this.stats?.release(this.data.byteLength);
  }
}

class MutableStats {
  liveTensors = 0;
  liveBytes = 0;
  peakBytes = 0;
  allocations = 0;
  allocate(bytes: number): void {
    this.liveTensors++;
    this.allocations++;
    this.liveBytes += bytes;
    this.peakBytes = Math.max(this.peakBytes, this.liveBytes);
  }
  release(bytes: number): void {
    this.liveTensors--;
    this.liveBytes -= bytes;
  }
  snapshot(): MemoryStats {
    const { liveTensors, liveBytes, peakBytes, allocations } = this;
    return { liveTensors, liveBytes, peakBytes, allocations };
  }
}

/**
 * The reference backend: plain TypeScript on the host, built from the kernel
 * specs' reference implementations (with a cache-blocked GEMM). It runs
 * anywhere and is the oracle every other backend is tested against.
 */
export class CpuBackend implements Backend {
  readonly name = 'cpu';
  readonly info: BackendInfo;
  readonly #stats = new MutableStats();
  #disposed = false;

  constructor() {
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
  supports(kernel: string, _dtype?: DType): boolean {
    return kernelByName(kernel) !== undefined;
  }

  #checkAlive(api: string): void {
    if (this.#disposed)
      throw new RayoError('backend was disposed', {
        kernel: api,
        expected: 'a live backend',
        actual: 'disposed cpu backend',
      });
  }

  #tensor(data: HostArray, shape: Shape, dtype: DType): Tensor {
    return new Tensor(this, shape, dtype, new CpuStorage(data, this.#stats));
  }

  upload(data: HostArray | readonly number[], shape: Shape, dtype: DType = 'f32'): Tensor {
    this.#checkAlive('upload');
    checkShapeAndDType('upload', shape, dtype);
    // The cpu backend keeps the array itself, so it takes a copy of the caller's.
    const given = hostDataFor('upload', data, shape, dtype);
    const host = given === data ? given.slice() : given;
    return this.#tensor(host, shape, dtype);
  }

  write(tensor: Tensor, data: HostArray | readonly number[]): void {
    this.#checkAlive('write');
    // Work runs at submit on this backend, so a plain copy is already in order.
    const { storage, data: host } = checkWrite<CpuStorage>(this, tensor, data);
    storage.data.set(host);
  }

  empty(shape: Shape, dtype: DType = 'f32'): Tensor {
    return this.#empty('empty', shape, dtype);
  }

  #empty(api: string, shape: Shape, dtype: DType): Tensor {
    this.#checkAlive(api);
    checkShapeAndDType(api, shape, dtype);
    const bytes = sizeOf(shape) * bytesPerElement(dtype);
    const details = {
      kernel: api,
      argument: 'shape',
      expected: `<= ${this.info.limits.maxBufferBytes} bytes (maxBufferBytes)`,
      actual: `${bytes} bytes for ${dtype}${formatShape(shape)}`,
    };
    if (bytes > this.info.limits.maxBufferBytes) {
      throw new OutOfMemoryError('the tensor is larger than the cpu backend can allocate', details);
    }
    let data: HostArray;
    try {
      data = allocHost(dtype, sizeOf(shape));
    } catch (error) {
      // The JavaScript heap refused the array.
      if (error instanceof RangeError) {
        throw new OutOfMemoryError('the host could not allocate the tensor', { ...details, cause: error });
      }
      throw error;
    }
    return this.#tensor(data, shape, dtype);
  }

  zeros(shape: Shape, dtype: DType = 'f32'): Tensor {
    return this.empty(shape, dtype);
  }

  #own(api: string, tensor: Tensor, argument: string): HostArray {
    return ownedStorage<CpuStorage>(this, api, tensor, argument).data;
  }

  /** The tensor's host memory itself, without a copy (for cpu-side helpers). */
  hostArrayOf(tensor: Tensor): HostArray {
    return this.#own('hostArrayOf', tensor, 'tensor');
  }

  read(tensor: Tensor): Promise<HostArray> {
    try {
      this.#checkAlive('read');
      const data = this.#own('read', tensor, 'tensor');
      checkWritten('read', tensor, 'tensor');
      return Promise.resolve(data.slice());
    } catch (error) {
      return Promise.reject(error);
    }
  }

  copy(src: Tensor, dst?: Tensor): Tensor {
    return this.run(copySpec, [src], {}, { out: [dst] })[0]!;
  }

  run<A extends AttrValues>(
    spec: KernelSpec<A>,
    inputs: readonly (Tensor | undefined)[],
    attrs?: Partial<A>,
    options?: RunOptions,
  ): Tensor[] {
    checkInputsWritten(spec, inputs);
    const { outputs, execute } = this.record(spec, inputs, attrs, options);
    execute();
    return outputs;
  }

  readonly #callSite: CallSite<Impl> = {
    backend: this,
    checkAlive: (api) => this.#checkAlive(api),
    implementationOf: (spec) => FAST_PATHS[spec.name] ?? spec.reference,
    floatDtypes: () => FLOAT,
    allocate: (api, shape, dtype) => this.#empty(api, shape, dtype),
  };

  /** Validates and allocates now; returns the outputs and the work to do. */
  record<A extends AttrValues>(
    spec: KernelSpec<A>,
    inputs: readonly (Tensor | undefined)[],
    attrs: Partial<A> | undefined,
    options: RunOptions | undefined,
  ): PreparedCall<Impl, A> & { execute: () => void } {
    const call = prepareCall(this.#callSite, spec, inputs, attrs, options);
    const { implementation: impl, io, outputs } = call;
    const execute = () => {
      const arrays = inputs.map((t) => (t ? t.storage<CpuStorage>().data : undefined));
      // Every implementation is f32 code: half tensors are widened and rounded around it.
      const results = runReference(spec, arrays, call.attrs, io, impl);
      if (results.length !== outputs.length) {
        throw new RayoError('implementation returned the wrong number of outputs', {
          kernel: spec.name,
          expected: String(outputs.length),
          actual: String(results.length),
        });
      }
      results.forEach((result, i) => {
        const target = outputs[i]!.storage<CpuStorage>().data;
        if (result.length !== target.length) {
          throw new RayoError('implementation returned an output of the wrong size', {
            kernel: spec.name,
            argument: io.outputs[i]!.name,
            expected: `${target.length} elements`,
            actual: `${result.length}`,
          });
        }
        target.set(result);
      });
    };
    return { ...call, execute };
  }

  batch(): CommandBatch {
    this.#checkAlive('batch');
    return new CpuCommandBatch(this);
  }

  sync(): Promise<void> {
    return Promise.resolve();
  }

  memory(): MemoryStats {
    return this.#stats.snapshot();
  }

  createWeightCache(): WeightCache {
    this.#checkAlive('createWeightCache');
    return new DeviceWeightCache({
      backend: this,
      writeHost: (tensor, data) => this.hostArrayOf(tensor).set(data),
      // A view over the first elements of `base`; disposing it frees nothing.
      prefixOf: (base, shape) =>
        new Tensor(
          this,
          shape,
          base.dtype,
          new CpuStorage(this.hostArrayOf(base).subarray(0, sizeOf(shape)), undefined),
        ),
    });
  }

  dispose(): void {
    this.#disposed = true;
  }
}

type CpuCall = PreparedCall<Impl, AttrValues> & { execute: () => void };

/** Records validated kernels and runs them in order on submit (and again on each replay). */
class CpuCommandBatch extends RecordingBatch<CpuCall> {
  readonly #work: (() => void)[] = [];
  constructor(backend: CpuBackend) {
    super(backend);
  }

  protected keep(call: CpuCall): void {
    this.#work.push(call.execute);
  }

  submit(): Promise<void> {
    try {
      this.calls.checkSubmittable();
      for (const work of this.#work) work();
      this.calls.submitted();
      return Promise.resolve();
    } catch (error) {
      return Promise.reject(error);
    }
  }

  dispose(): void {
    this.#work.length = 0;
    this.calls.clear();
  }
}

export function createCpuBackend(): CpuBackend {
  return new CpuBackend();
}

export const cpuBackendProvider: BackendProvider = {
  name: 'cpu',
  probe: () => Promise.resolve(undefined),
  create: () => Promise.resolve(new CpuBackend()),
};
