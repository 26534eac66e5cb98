import { RayoError } from '@rayo/core';

/** OpenAI's error `type`s the server answers with. */
export type ApiErrorType =
  | 'invalid_request_error'
  | 'not_found_error'
  | 'rate_limit_error'
  | 'server_overloaded'
  | 'server_error';

/**
 * An error the server answers with an HTTP status and OpenAI's error body,
 * `{ error: { message, type, param, code } }`.
 */
export class ApiError extends RayoError {
  readonly status: number;
  readonly type: ApiErrorType;
  readonly code: string | null;
  readonly param: string | null;

  constructor(
    status: number,
    type: ApiErrorType,
    code: string | null,
    message: string,
    details: { operation: string; argument?: string; expected?: string; actual?: string },
  ) {
    super(message, details);
    this.status = status;
    this.type = type;
    this.code = code;
    this.param = details.argument ?? null;
  }

  /** The response body. */
  body(): { error: { message: string; type: ApiErrorType; param: string | null; code: string | null } } {
    return { error: { message: this.message, type: this.type, param: this.param, code: this.code } };
  }
}

/** A 400 for a request parameter: what was expected and what came. */
export function invalidParameter(
  operation: string,
  param: string,
  expected: string,
  actual: unknown,
  code: string | null = 'invalid_value',
): ApiError {
  return new ApiError(400, 'invalid_request_error', code, `invalid '${param}'`, {
    operation,
    argument: param,
    expected,
    actual: describe(actual),
  });
}

/** A short rendering of a JSON value for an error message. */
export function describe(value: unknown): string {
  if (typeof value === 'string') return JSON.stringify(value.length > 60 ? `${value.slice(0, 60)}…` : value);
  if (Array.isArray(value)) return `an array of ${value.length}`;
  if (value === null) return 'null';
  if (typeof value === 'object') return 'an object';
  return String(value);
}
