import { RayoError } from '@rayo/core';

/** Why the scheduler turned a request away before it ran. */
export type RefusalReason = 'queue-full' | 'queue-timeout' | 'shutting-down';

/** A request the scheduler did not run: its queue was full, it waited too long, or the server is closing. */
export class SchedulerRefusal extends RayoError {
  readonly reason: RefusalReason;

  constructor(reason: RefusalReason, message: string, expected: string, actual: string) {
    super(message, { operation: 'Scheduler.submit', argument: 'request', expected, actual });
    this.reason = reason;
  }
}

/** Why a sequence's tokens stopped coming before it ended by itself. */
export class SequenceCancelled extends RayoError {
  override readonly name = 'AbortError';
}
