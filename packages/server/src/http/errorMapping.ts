import { InvalidArgumentError, RayoError } from '@rayo/core';
import { ApiError } from '../api/apiError.js';
import { SchedulerRefusal, SequenceCancelled } from '../scheduler/schedulerErrors.js';

/**
 * The HTTP answer to an error: an ApiError as it is; a full queue is 429,
 * a queue timeout or a closing server 503 (both retryable); bad input that a
 * library refused (a chat template, token ids) is 400; anything else 500.
 */
export function toApiError(error: unknown, operation: string): ApiError {
  if (error instanceof ApiError) return error;
  if (error instanceof SchedulerRefusal) {
    const details = { operation };
    return error.reason === 'queue-full'
      ? new ApiError(429, 'rate_limit_error', 'queue_full', error.message, details)
      : new ApiError(503, 'server_overloaded', error.reason.replace('-', '_'), error.message, details);
  }
  // Cancelled by the server, not by its client: the server is closing.
  if (error instanceof SequenceCancelled)
    return new ApiError(503, 'server_overloaded', 'shutting_down', 'the server is shutting down', {
      operation,
    });
  if (error instanceof InvalidArgumentError) {
    return new ApiError(400, 'invalid_request_error', 'invalid_value', error.message, {
      operation,
      ...(error.argument !== undefined ? { argument: error.argument } : {}),
    });
  }
  const message = error instanceof Error ? error.message : String(error);
  return new ApiError(500, 'server_error', error instanceof RayoError ? error.name : null, message, {
    operation,
  });
}
