import {
  BackendUnavailableError,
  DeviceLostError,
  KernelCompileError,
  OutOfMemoryError,
  RayoError,
  type RayoErrorDetails,
} from '@rayo/core';

/** A CUDA driver status code (`CUresult`); 0 is success. */
export type CUresult = number;

export const CUDA_SUCCESS = 0;
export const CUDA_ERROR_OUT_OF_MEMORY = 2;
export const CUDA_ERROR_NOT_READY = 600;

/**
 * Names of the codes rayo is likely to meet, for when `cuGetErrorName` cannot
 * answer (an old driver, or a library that failed half-way through loading).
 */
const NAMES: Readonly<Record<number, string>> = {
  0: 'CUDA_SUCCESS',
  1: 'CUDA_ERROR_INVALID_VALUE',
  2: 'CUDA_ERROR_OUT_OF_MEMORY',
  3: 'CUDA_ERROR_NOT_INITIALIZED',
  4: 'CUDA_ERROR_DEINITIALIZED',
  34: 'CUDA_ERROR_STUB_LIBRARY',
  36: 'CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER',
  46: 'CUDA_ERROR_DEVICE_UNAVAILABLE',
  100: 'CUDA_ERROR_NO_DEVICE',
  101: 'CUDA_ERROR_INVALID_DEVICE',
  102: 'CUDA_ERROR_DEVICE_NOT_LICENSED',
  200: 'CUDA_ERROR_INVALID_IMAGE',
  201: 'CUDA_ERROR_INVALID_CONTEXT',
  209: 'CUDA_ERROR_NO_BINARY_FOR_GPU',
  214: 'CUDA_ERROR_ECC_UNCORRECTABLE',
  218: 'CUDA_ERROR_INVALID_PTX',
  220: 'CUDA_ERROR_NVLINK_UNCORRECTABLE',
  221: 'CUDA_ERROR_JIT_COMPILER_NOT_FOUND',
  222: 'CUDA_ERROR_UNSUPPORTED_PTX_VERSION',
  223: 'CUDA_ERROR_JIT_COMPILATION_DISABLED',
  226: 'CUDA_ERROR_CONTAINED',
  300: 'CUDA_ERROR_INVALID_SOURCE',
  304: 'CUDA_ERROR_OPERATING_SYSTEM',
  400: 'CUDA_ERROR_INVALID_HANDLE',
  401: 'CUDA_ERROR_ILLEGAL_STATE',
  500: 'CUDA_ERROR_NOT_FOUND',
  600: 'CUDA_ERROR_NOT_READY',
  700: 'CUDA_ERROR_ILLEGAL_ADDRESS',
  701: 'CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES',
  702: 'CUDA_ERROR_LAUNCH_TIMEOUT',
  709: 'CUDA_ERROR_CONTEXT_IS_DESTROYED',
  710: 'CUDA_ERROR_ASSERT',
  714: 'CUDA_ERROR_HARDWARE_STACK_ERROR',
  715: 'CUDA_ERROR_ILLEGAL_INSTRUCTION',
  716: 'CUDA_ERROR_MISALIGNED_ADDRESS',
  717: 'CUDA_ERROR_INVALID_ADDRESS_SPACE',
  718: 'CUDA_ERROR_INVALID_PC',
  719: 'CUDA_ERROR_LAUNCH_FAILED',
  721: 'CUDA_ERROR_TENSOR_MEMORY_LEAK',
  800: 'CUDA_ERROR_NOT_PERMITTED',
  801: 'CUDA_ERROR_NOT_SUPPORTED',
  802: 'CUDA_ERROR_SYSTEM_NOT_READY',
  803: 'CUDA_ERROR_SYSTEM_DRIVER_MISMATCH',
  804: 'CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE',
  810: 'CUDA_ERROR_MPS_CLIENT_TERMINATED',
  900: 'CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED',
  901: 'CUDA_ERROR_STREAM_CAPTURE_INVALIDATED',
  902: 'CUDA_ERROR_STREAM_CAPTURE_MERGE',
  903: 'CUDA_ERROR_STREAM_CAPTURE_UNMATCHED',
  904: 'CUDA_ERROR_STREAM_CAPTURE_UNJOINED',
  905: 'CUDA_ERROR_STREAM_CAPTURE_ISOLATION',
  906: 'CUDA_ERROR_STREAM_CAPTURE_IMPLICIT',
  907: 'CUDA_ERROR_CAPTURED_EVENT',
  908: 'CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD',
  909: 'CUDA_ERROR_TIMEOUT',
  910: 'CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE',
  911: 'CUDA_ERROR_EXTERNAL_DEVICE',
  999: 'CUDA_ERROR_UNKNOWN',
};

/**
 * Errors after which the context is unusable: the driver documents that every
 * later call fails the same way until the process restarts.
 */
const STICKY: ReadonlySet<number> = new Set([
  4, 214, 220, 226, 700, 702, 709, 710, 714, 715, 716, 717, 718, 719, 721, 810, 911,
]);

/** Errors that mean CUDA cannot run on this machine at all. */
const UNAVAILABLE: ReadonlySet<number> = new Set([3, 34, 36, 46, 100, 101, 102, 802, 803, 804]);

/** Errors of `cuModuleLoadDataEx` that are about the module's code, not the device. */
const COMPILE: ReadonlySet<number> = new Set([200, 209, 218, 221, 222, 223]);

/** The built-in name of a code, or `CUDA_ERROR_<code>` for one the table does not know. */
export function cudaErrorName(code: CUresult): string {
  return NAMES[code] ?? `CUDA_ERROR_${code}`;
}

/** How a failed call is described: which call, which code, and the driver's own words. */
export interface CudaFailure {
  readonly call: string;
  readonly code: CUresult;
  readonly name: string;
  readonly description: string | undefined;
}

/**
 * The `cause` of every RayoError made from a CUresult: the raw status, for
 * code that wants to branch on it.
 */
export class CudaCallError extends Error implements CudaFailure {
  readonly call: string;
  readonly code: CUresult;
  readonly description: string | undefined;
  constructor(failure: CudaFailure) {
    super(`${failure.call}: ${failure.name} (${failure.code})`);
    this.name = failure.name;
    this.call = failure.call;
    this.code = failure.code;
    this.description = failure.description;
  }
}

/** `CUDA_ERROR_OUT_OF_MEMORY (2): out of memory`, the part of a message after the call. */
export function describeFailure(f: CudaFailure): string {
  return `${f.name} (${f.code})${f.description ? `: ${f.description}` : ''}`;
}

export interface FailureContext {
  /** The JIT compiler's error log, for module loads. */
  readonly log?: string;
  /** What was being loaded or done, e.g. the module key; becomes the error's `kernel`. */
  readonly subject?: string;
  /** Extra words appended to the message (sizes, handles). */
  readonly detail?: string;
}

/**
 * The RayoError for a failed driver call. The message names the call and the
 * CUDA error (`cuMemAlloc_v2: CUDA_ERROR_OUT_OF_MEMORY (2): out of memory`);
 * the class says what kind of failure it is.
 */
export function cudaError(f: CudaFailure, context: FailureContext = {}): RayoError {
  const cause = new CudaCallError(f);
  const detail = context.detail ? ` (${context.detail})` : '';
  const details: RayoErrorDetails = { operation: context.subject ?? f.call, cause };
  const where = context.subject ? `${f.call}: ` : '';
  const message = `${where}${describeFailure(f)}${detail}`;
  if (f.call === 'cuModuleLoadDataEx' && COMPILE.has(f.code)) {
    const log = context.log?.trim() ? context.log.trim() : '(the JIT compiler wrote no log)';
    return new KernelCompileError(message, log, details);
  }
  if (f.code === CUDA_ERROR_OUT_OF_MEMORY) return new OutOfMemoryError(message, details);
  if (STICKY.has(f.code)) {
    return new DeviceLostError(
      `${message}; the CUDA context is unusable: dispose the backend and create a new one (if that fails the same way, only a new process can use the GPU again)`,
      details,
    );
  }
  if (UNAVAILABLE.has(f.code)) return new BackendUnavailableError(message, details);
  return new RayoError(message, details);
}

/** Whether a code leaves the context unusable. */
export function isStickyError(code: CUresult): boolean {
  return STICKY.has(code);
}
