import { BackendUnavailableError, DeviceLostError, InvalidArgumentError, RayoError } from '@rayo/core';
import { type DeviceProperties, readDeviceProperties } from './device.js';
import { CUDA_SUCCESS, type CUresult, cudaError, type FailureContext, isStickyError } from './errors.js';
import { type CuOut, errorNameOf, errorStringOf, type LibCuda } from './libcuda.js';

/** Kernel names kept to say where an asynchronous fault happened. */
const MAX_IN_FLIGHT = 256;

// The context each library last made current on this thread (every JS
// thread has its own copy of this module), so that staying costs no call.
const currentContext = new WeakMap<LibCuda, bigint>();

/**
 * The ground every driver call stands on: the device's primary context, made
 * current before a call, the RayoError of a failed CUresult, and the kernels
 * a later asynchronous fault is blamed on.
 */
export class DriverContext {
  readonly lib: LibCuda;
  readonly device: DeviceProperties;
  readonly context: bigint;
  protected readonly deviceHandle: number;
  #lost: DeviceLostError | undefined;
  protected disposed = false;
  // Kernels enqueued since the stream was last seen idle: a fault is reported
  // asynchronously, by a later call, and happened in one of them. Kept as the
  // lists they were enqueued in (a graph's list by reference, not copied on
  // every replay), the oldest dropped once the rest name MAX_IN_FLIGHT.
  readonly #inFlight: (readonly string[])[] = [];
  #inFlightNames = 0;
  /** While a graph is captured, the kernels it takes (they run when it is launched). */
  protected capturing: string[] | undefined;

  constructor(lib: LibCuda, ordinal: number) {
    this.lib = lib;
    this.check('cuInit', lib.cuInit(0));
    const count = this.value('cuDeviceGetCount', lib.cuDeviceGetCount());
    if (count < 1) {
      throw new BackendUnavailableError('the CUDA driver reports no device', {
        operation: 'cuDeviceGetCount',
        expected: 'at least one CUDA device',
        actual: String(count),
      });
    }
    if (!Number.isInteger(ordinal) || ordinal < 0 || ordinal >= count) {
      throw new InvalidArgumentError('no CUDA device of this ordinal', {
        operation: 'CudaDriver',
        argument: 'device',
        expected: `an integer in [0, ${count - 1}]`,
        actual: String(ordinal),
      });
    }
    const dev = this.value('cuDeviceGet', lib.cuDeviceGet(ordinal));
    this.deviceHandle = dev;
    this.device = readDeviceProperties(lib, ordinal, dev, this.value.bind(this));
    this.context = this.value('cuDevicePrimaryCtxRetain', lib.cuDevicePrimaryCtxRetain(dev));
    try {
      this.activate();
    } catch (error) {
      lib.cuDevicePrimaryCtxRelease_v2(dev);
      throw error;
    }
  }

  // ------------------------------------------------------------------ errors

  /** The RayoError for a failed call; remembers errors that leave the context unusable. */
  error(call: string, status: CUresult, context: FailureContext = {}): RayoError {
    const culprits = isStickyError(status) && !this.#lost ? [...new Set(this.#recentKernels())] : [];
    if (culprits.length > 0) {
      const which = culprits.length === 1 ? 'kernel' : `one of the ${culprits.length} kernels`;
      context = {
        ...context,
        subject: culprits.join(', '),
        detail: `a fault in ${which} ${culprits.map((k) => `'${k}'`).join(', ')} enqueued since the stream was last idle${context.detail ? `; ${context.detail}` : ''}`,
      };
    }
    const error = cudaError(
      {
        call,
        code: status,
        name: errorNameOf(this.lib, status),
        description: errorStringOf(this.lib, status),
      },
      context,
    );
    if (error instanceof DeviceLostError) this.#lost ??= error;
    return error;
  }

  /** Throws the RayoError for `status` unless it is success. */
  check(call: string, status: CUresult, context?: FailureContext): void {
    if (status !== CUDA_SUCCESS) throw this.error(call, status, context);
  }

  /** The out-parameter of a successful call, or the RayoError of a failed one. */
  value<T>(call: string, out: CuOut<T>, context?: FailureContext): T {
    this.check(call, out.status, context);
    return out.value;
  }

  /** Throws if the driver was disposed or the context was lost. */
  live(api: string): void {
    if (this.#lost) {
      throw new DeviceLostError(
        `the CUDA context is unusable after an earlier error: ${this.#lost.message}`,
        {
          operation: api,
          cause: this.#lost,
        },
      );
    }
    if (this.disposed) {
      throw new RayoError('the CUDA driver was disposed', {
        operation: api,
        expected: 'a live backend',
        actual: 'disposed',
      });
    }
  }

  /** The error that made the context unusable, if one happened. */
  get lostError(): DeviceLostError | undefined {
    return this.#lost;
  }

  /**
   * Makes this device's primary context current on the calling thread; a
   * lookup when it already is. Every call that touches the device does this,
   * so that backends on two devices can take turns on one thread.
   */
  activate(): void {
    if (currentContext.get(this.lib) === this.context) return;
    this.check('cuCtxSetCurrent', this.lib.cuCtxSetCurrent(this.context));
    currentContext.set(this.lib, this.context);
  }

  /** Makes the context current, then makes the driver call `invoke` and throws the RayoError of its failure. */
  protected call(name: string, invoke: (lib: LibCuda) => CUresult): void {
    this.activate();
    this.check(name, invoke(this.lib));
  }

  /** Releases the primary context; the caller freed what lives in it first. */
  protected releaseContext(): void {
    this.lib.cuDevicePrimaryCtxRelease_v2(this.deviceHandle);
    currentContext.delete(this.lib);
  }

  // ------------------------------------------------------- fault attribution

  /** Notes kernels enqueued on the stream (or taken into the graph being captured); `kernels` is kept, so must not change. */
  protected enqueued(kernels: readonly string[]): void {
    if (this.capturing) {
      this.capturing.push(...kernels);
      return;
    }
    if (kernels.length === 0) return;
    const lists = this.#inFlight;
    lists.push(kernels);
    this.#inFlightNames += kernels.length;
    // Enough to name the culprits; work that is never waited for must not grow this.
    while (this.#inFlightNames - lists[0]!.length >= MAX_IN_FLIGHT) {
      this.#inFlightNames -= lists.shift()!.length;
    }
  }

  /** The last MAX_IN_FLIGHT kernels enqueued since the stream was last seen idle, oldest first. */
  #recentKernels(): string[] {
    return this.#inFlight.flat().slice(-MAX_IN_FLIGHT);
  }

  /** The stream was seen idle: nothing enqueued so far can fault any more. */
  protected idle(): void {
    this.#inFlight.length = 0;
    this.#inFlightNames = 0;
  }
}
