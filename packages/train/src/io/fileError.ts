import { RayoError } from '@rayo/core';

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
  return new RayoError(message, {
    kernel: api,
    argument: path,
    expected,
    actual: describeNodeError(error),
    cause: error,
  });
}
