import { InvalidArgumentError } from '@rayo/core';
import type { SchedulerLimits } from '../scheduler/scheduler.js';

/** What the server takes: the scheduler's limits, and each request's. */
export interface ServerLimits extends SchedulerLimits {
  /** Most prompt tokens (after the chat template); a longer prompt is a 400. Default: the context. */
  readonly maxPromptTokens: number;
  /** Most `max_tokens` a request may ask; more is a 400. Default: the context. */
  readonly maxTokens: number;
  /** `max_tokens` of a request that gives none (within the context left after its prompt). Default 256. */
  readonly defaultMaxTokens: number;
  /** Largest request body in bytes; a larger one is a 413. Default 1 MiB. */
  readonly maxBodyBytes: number;
}

/** `limits` with the defaults for an engine of `maxSequences` sequences of `maxSequence` rows. */
export function serverLimits(
  limits: Partial<ServerLimits>,
  maxSequences: number,
  maxSequence: number,
): ServerLimits {
  const full: ServerLimits = {
    maxConcurrent: limits.maxConcurrent ?? maxSequences,
    maxQueue: limits.maxQueue ?? 64,
    queueTimeoutMs: limits.queueTimeoutMs ?? 30_000,
    maxPromptTokens: limits.maxPromptTokens ?? maxSequence,
    maxTokens: limits.maxTokens ?? maxSequence,
    defaultMaxTokens: limits.defaultMaxTokens ?? 256,
    maxBodyBytes: limits.maxBodyBytes ?? 1 << 20,
  };
  for (const name of ['maxPromptTokens', 'maxTokens', 'defaultMaxTokens', 'maxBodyBytes'] as const) {
    const value = full[name];
    if (!Number.isSafeInteger(value) || value < 1) {
      throw new InvalidArgumentError(`${name} must be a positive integer`, {
        operation: 'ModelServer',
        argument: `limits.${name}`,
        expected: 'an integer >= 1',
        actual: String(value),
      });
    }
  }
  return full;
}
