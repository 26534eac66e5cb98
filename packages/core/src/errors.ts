/**
 * Every failure rayo reports is a RayoError. Argument errors carry the
 * operation, the argument and the expected against the actual value, so a
 * message alone says what to fix.
 */
export interface RayoErrorDetails {
  /**
   * What rejected its input or failed: a kernel (`'matmul'`), a backend call
   * (`'zeros'`, `'upload'`) or an API (`'generate'`, `'LlamaModel.load'`).
   */
  readonly operation?: string;
  /** @deprecated Renamed `operation`; still accepted, for one minor version. */
  readonly kernel?: string;
  /** The argument at fault, e.g. `b`, `grads[2]`, `attrs.eps` or `out[0]`. */
  readonly argument?: string;
  readonly expected?: string;
  readonly actual?: string;
  readonly cause?: unknown;
}

export class RayoError extends Error {
  /** What rejected its input or failed: a kernel, a backend call or an API (see {@link RayoErrorDetails.operation}). */
  readonly operation: string | undefined;
  readonly argument: string | undefined;
  readonly expected: string | undefined;
  readonly actual: string | undefined;

  constructor(message: string, details: RayoErrorDetails = {}) {
    const operation = details.operation ?? details.kernel;
    super(
      formatMessage(message, operation, details),
      details.cause === undefined ? undefined : { cause: details.cause },
    );
    this.name = new.target.name;
    this.operation = operation;
    this.argument = details.argument;
    this.expected = details.expected;
    this.actual = details.actual;
  }

  /** @deprecated Renamed {@link RayoError.operation}, which it returns; kept for one minor version. */
  get kernel(): string | undefined {
    return this.operation;
  }
}

function formatMessage(message: string, operation: string | undefined, d: RayoErrorDetails): string {
  const where = operation ? (d.argument ? `${operation}: argument '${d.argument}': ` : `${operation}: `) : '';
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
