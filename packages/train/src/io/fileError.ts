import { RayoError, type RayoErrorDetails } from '@rayo/core';

/** What a Node file-system error says: its code and message, e.g. `ENOSPC: no space left on device`. */
export function describeNodeError(error: unknown): string {
  const { code, message } = (error ?? {}) as { code?: unknown; message?: unknown };
  const text = typeof message === 'string' ? message : String(error);
  return typeof code === 'string' && !text.startsWith(code) ? `${code}: ${text}` : text;
}

/** The Node error code of `error` or of its cause (a `fileError` keeps the original as its cause). */
export function nodeErrorCode(error: unknown): string | undefined {
  const code = (error as { code?: unknown } | null)?.code;
  if (typeof code === 'string') return code;
  const cause = (error as { cause?: unknown } | null)?.cause;
  return cause === undefined ? undefined : nodeErrorCode(cause);
}

/**
 * A failed file operation as a RayoError naming the file (`argument`), with
 * the system's reason as the actual value and the original error as the cause.
 * A RayoError passes through as it is.
 */
export function fileError(
  api: string,
  path: string,
  message: string,
  expected: string,
  error: unknown,
): RayoError {
  if (error instanceof RayoError) return error;
  return new FileSystemError(message, nodeErrorCode(error), {
    operation: api,
    argument: path,
    expected,
    actual: describeNodeError(error),
    cause: error,
  });
}

/**
 * A file operation the system refused. `code` is Node's (`ENOENT`,
 * `ENOSPC`, …), so that code written against Node's errors
 * (`error.code === 'ENOENT'`) keeps working.
 */
export class FileSystemError extends RayoError {
  readonly code: string | undefined;

  constructor(message: string, code: string | undefined, details: RayoErrorDetails) {
    super(message, details);
    this.code = code;
  }
}

/**
 * `error` again with `path` in its message where it lacks it: a refusal
 * found in parsed contents (a config field, a metadata key) then names the
 * file it came from as well as the field. The class, operation, argument,
 * expected and actual values stay; anything else passes through as it is.
 */
export function namingFile(error: unknown, path: string): unknown {
  if (!(error instanceof RayoError) || error.message.includes(path)) return error;
  const { operation, argument, expected, actual } = error;
  const where = operation ? (argument ? `${operation}: argument '${argument}': ` : `${operation}: `) : '';
  const tail =
    expected !== undefined || actual !== undefined
      ? ` (expected ${expected ?? '?'}, got ${actual ?? '?'})`
      : '';
  const { message } = error;
  if (!message.startsWith(where) || !message.endsWith(tail) || error.constructor.length > 1) return error;
  const bare = message.slice(where.length, message.length - tail.length);
  const Class = error.constructor as new (message: string, details: RayoErrorDetails) => RayoError;
  return new Class(`${bare} in ${path}`, { operation, argument, expected, actual, cause: error });
}
