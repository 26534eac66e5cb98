/**
 * Every failure rayo reports is a RayoError. Kernel argument errors carry the
 * kernel, the argument and the expected against the actual value, so a message
 * alone says what to fix.
 */
export interface RayoErrorDetails {
  /** The kernel (or API) that rejected its input. */
  readonly kernel?: string;
  /** The argument at fault, e.g. `b`, `grads[2]`, `attrs.eps` or `out[0]`. */
  readonly argument?: string;
  readonly expected?: string;
  readonly actual?: string;
  readonly cause?: unknown;
}

export class RayoError extends Error {
  readonly kernel: string | undefined;
  readonly argument: string | undefined;
  readonly expected: string | undefined;
  readonly actual: string | undefined;

  constructor(message: string, details: RayoErrorDetails = {}) {
    super(
      formatMessage(message, details),
      details.cause === undefined ? undefined : { cause: details.cause },
    );
    this.name = new.target.name;
    this.kernel = details.kernel;
    this.argument = details.argument;
    this.expected = details.expected;
    this.actual = details.actual;
  }
}

function formatMessage(message: string, d: RayoErrorDetails): string {
  const where = d.kernel ? (d.argument ? `${d.kernel}: argument '${d.argument}': ` : `${d.kernel}: `) : '';
  const tail =
    d.expected !== undefined || d.actual !== undefined
      ? ` (expected ${d.expected ?? '?'}, got ${d.actual ?? '?'})`
      : '';
  return `${where}${message}${tail}`;
}

/** A tensor's shape does not fit what the kernel needs. */
export class ShapeError extends RayoError {}
/** A tensor's element type is not one the kernel accepts. */
export class DTypeError extends RayoError {}
/** An attribute or plain argument is out of range or of the wrong kind. */
export class InvalidArgumentError extends RayoError {}
/** A tensor was used after `dispose()`. */
export class DisposedTensorError extends RayoError {}
/** Tensors of two different backends met in one call. */
export class BackendMismatchError extends RayoError {}
/** The device could not allocate the memory asked for. */
export class OutOfMemoryError extends RayoError {}
/**
 * A tensor was read, or used outside its batch, before the batch that writes
 * it was submitted: its memory holds nothing meaningful yet.
 */
export class UnsubmittedWriteError extends RayoError {}
/** The device was lost; pending work was abandoned. */
export class DeviceLostError extends RayoError {}
/** A generated kernel failed to compile; the message carries the compiler log. */
export class KernelCompileError extends RayoError {
  readonly log: string;
  constructor(message: string, log: string, details: RayoErrorDetails = {}) {
    super(`${message}\n${log}`, details);
    this.log = log;
  }
}
/** The backend has no implementation of a kernel spec. */
export class UnsupportedOnBackendError extends RayoError {}
/** A backend is not installed or cannot run on this machine; the message says why. */
export class BackendUnavailableError extends RayoError {}

/**
 * Two copies of @rayo/core met in one program (a backend built on one, kernel
 * specs or tensors from the other): their kernel specs are different objects,
 * so nothing from one runs on the other.
 */
export class DuplicateCoreError extends RayoError {}
