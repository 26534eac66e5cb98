import { InvalidArgumentError } from '@rayo/core';
import type { DecodeEngine, SequenceRequest, StepResult } from '../engine/decodeEngine.js';
import { SchedulerRefusal, SequenceCancelled } from './schedulerErrors.js';
import { TokenChannel } from './tokenChannel.js';

/** How many sequences run and wait, and for how long. */
export interface SchedulerLimits {
  /** Sequences decoding at once (the engine may hold fewer). */
  readonly maxConcurrent: number;
  /** Requests waiting for admission; one more is refused. */
  readonly maxQueue: number;
  /** Longest wait for admission, in ms; a request still waiting then is refused. */
  readonly queueTimeoutMs: number;
}

/** How a sequence ended: a stop token, the length limit, a stop string its reader saw, a cancel, or an error. */
export type SequenceEnd = 'stop-token' | 'length' | 'stop-string' | 'cancelled' | 'failed';

/** What the scheduler reports as it goes (the server's metrics). */
export interface SchedulerObserver {
  /** A sequence's first token came, `waitedMs` after it was submitted. */
  firstToken(waitedMs: number): void;
  token(): void;
  /** A sequence ended; `promptTokens` is 0 for one that never left the queue. */
  ended(how: SequenceEnd, promptTokens: number, generatedTokens: number): void;
  refused(refusal: SchedulerRefusal): void;
}

type State = 'queued' | 'active' | 'ended';

/**
 * One submitted request: `admitted` settles when it leaves the queue (or is
 * refused), and iterating it gives its tokens as the engine makes them.
 * Breaking out of the iteration, or `cancel`, ends it and gives back its
 * room in the engine.
 */
export class ScheduledSequence implements AsyncIterable<number> {
  readonly request: SequenceRequest;
  readonly admitted: Promise<void>;
  /** Tokens made so far. */
  generated = 0;
  /** How it ended; undefined while it runs. */
  end: SequenceEnd | undefined;
  readonly #tokens: AsyncIterable<number>;
  readonly #cancel: (how: 'cancelled' | 'stop-string') => void;

  /** Made by `Scheduler.submit`, which pushes the tokens into `tokens`. */
  constructor(
    request: SequenceRequest,
    admitted: Promise<void>,
    tokens: AsyncIterable<number>,
    cancel: (how: 'cancelled' | 'stop-string') => void,
  ) {
    this.request = request;
    this.admitted = admitted;
    this.#tokens = tokens;
    this.#cancel = cancel;
  }

  /** Ends the sequence now (a client gone, say); `stop-string` when its reader found a stop string. */
  cancel(how: 'cancelled' | 'stop-string' = 'cancelled'): void {
    this.#cancel(how);
  }

  async *[Symbol.asyncIterator](): AsyncGenerator<number, void, undefined> {
    let done = false;
    try {
      for await (const token of this.#tokens) yield token;
      done = true;
    } finally {
      // A reader that stops early no longer wants tokens.
      if (!done) this.cancel();
    }
  }
}

interface Entry {
  readonly sequence: ScheduledSequence;
  readonly channel: TokenChannel;
  readonly submittedAt: number;
  state: State;
  engineSequence: unknown;
  timer: ReturnType<typeof setTimeout> | undefined;
  admit: () => void;
  refuse: (error: Error) => void;
  /** Ended while in a step: released when the step returns. */
  releaseAfterStep: boolean;
}

const closingRefusal = () =>
  new SchedulerRefusal('shutting-down', 'the server is shutting down', 'a running server', 'closing');

/** Lets I/O (new requests, disconnects) run between steps, even when a step finishes in microtasks. */
const nextTurn = () => new Promise<void>((resolve) => setImmediate(resolve));

/**
 * Continuous batching over a `DecodeEngine`: requests wait in a FIFO queue
 * (bounded, with a timeout); between steps the loop admits from its head
 * while the engine has room and fewer than `maxConcurrent` run, steps every
 * running sequence by one token, and releases each sequence the moment it
 * ends (a stop token, its `maxNewTokens`, a cancel), so the next in the queue
 * takes its place at the next step.
 */
export class Scheduler {
  readonly engine: DecodeEngine;
  readonly limits: SchedulerLimits;
  readonly #observer: SchedulerObserver | undefined;
  readonly #queue: Entry[] = [];
  readonly #active: Entry[] = [];
  #inStep = new Set<Entry>();
  #looping = false;
  #closing = false;
  #idleWaiters: (() => void)[] = [];

  constructor(engine: DecodeEngine, limits: SchedulerLimits, observer?: SchedulerObserver) {
    for (const [name, least] of [
      ['maxConcurrent', 1],
      ['maxQueue', 0],
      ['queueTimeoutMs', 1],
    ] as const) {
      const value = limits[name];
      if (!Number.isSafeInteger(value) || value < least) {
        throw new InvalidArgumentError(`${name} must be an integer >= ${least}`, {
          operation: 'Scheduler',
          argument: name,
          expected: `an integer >= ${least}`,
          actual: String(value),
        });
      }
    }
    this.engine = engine;
    this.limits = limits;
    this.#observer = observer;
  }

  /** Requests waiting for admission. */
  get queued(): number {
    return this.#queue.length;
  }

  /** Sequences admitted and not yet released. */
  get active(): number {
    return this.#active.length;
  }

  /**
   * Queues `request` and returns its sequence. Throws a `SchedulerRefusal`
   * at once when the queue is full or the scheduler is closing; a request
   * that waits past `queueTimeoutMs` has its `admitted` rejected with one.
   */
  submit(request: SequenceRequest): ScheduledSequence {
    if (this.#closing) {
      this.#refuse(closingRefusal());
    }
    let admit!: () => void;
    let refuse!: (error: Error) => void;
    const admitted = new Promise<void>((resolve, reject) => {
      admit = resolve;
      refuse = reject;
    });
    // Handled here too: a reader that never awaits it leaves no unhandled rejection.
    admitted.catch(() => undefined);
    const channel = new TokenChannel();
    let entry!: Entry;
    const sequence = new ScheduledSequence(request, admitted, channel, (how) => this.#cancel(entry, how));
    entry = {
      sequence,
      channel,
      submittedAt: performance.now(),
      state: 'queued',
      engineSequence: undefined,
      timer: undefined,
      admit,
      refuse,
      releaseAfterStep: false,
    };
    // Straight in when nothing waits and there is room; else behind the others.
    if (this.#queue.length === 0 && this.#tryAdmit(entry)) {
      this.#kick();
      return sequence;
    }
    if (this.#queue.length >= this.limits.maxQueue) {
      this.#refuse(
        new SchedulerRefusal(
          'queue-full',
          'too many requests are waiting',
          `at most ${this.limits.maxQueue} waiting requests (maxQueue) beside ${this.#active.length} running`,
          `${this.#queue.length} waiting`,
        ),
      );
    }
    entry.timer = setTimeout(() => this.#timeOut(entry), this.limits.queueTimeoutMs);
    this.#queue.push(entry);
    this.#kick();
    return sequence;
  }

  /** Resolves once nothing runs or waits. */
  idle(): Promise<void> {
    if (!this.#looping && this.#active.length === 0 && this.#queue.length === 0) return Promise.resolve();
    return new Promise((resolve) => this.#idleWaiters.push(resolve));
  }

  /** Refuses every waiting request, cancels every running one, and resolves once all are released. */
  close(): Promise<void> {
    this.#closing = true;
    for (const entry of this.#queue.splice(0)) {
      clearTimeout(entry.timer);
      entry.state = 'ended';
      const refusal = closingRefusal();
      this.#observer?.refused(refusal);
      entry.sequence.end = 'cancelled';
      entry.refuse(refusal);
      entry.channel.end(refusal);
    }
    for (const entry of [...this.#active]) this.#cancel(entry, 'cancelled');
    return this.idle();
  }

  #refuse(refusal: SchedulerRefusal): never {
    this.#observer?.refused(refusal);
    throw refusal;
  }

  #hasRoom(): boolean {
    return this.#active.length < this.limits.maxConcurrent;
  }

  /** Admits `entry` if the engine has room for it now. */
  #tryAdmit(entry: Entry): boolean {
    if (!this.#hasRoom()) return false;
    const engineSequence = this.engine.admit(entry.sequence.request);
    if (engineSequence === undefined) return false;
    clearTimeout(entry.timer);
    entry.engineSequence = engineSequence;
    entry.state = 'active';
    this.#active.push(entry);
    entry.admit();
    return true;
  }

  #timeOut(entry: Entry): void {
    if (entry.state !== 'queued') return;
    this.#queue.splice(this.#queue.indexOf(entry), 1);
    entry.state = 'ended';
    entry.sequence.end = 'cancelled';
    const refusal = new SchedulerRefusal(
      'queue-timeout',
      'the request waited too long for a free sequence',
      `admission within ${this.limits.queueTimeoutMs} ms (queueTimeoutMs)`,
      `still waiting behind ${this.#active.length} running sequences`,
    );
    this.#observer?.refused(refusal);
    entry.refuse(refusal);
    entry.channel.end(refusal);
  }

  #cancel(entry: Entry, how: 'cancelled' | 'stop-string'): void {
    if (entry.state === 'ended') return;
    if (entry.state === 'queued') {
      clearTimeout(entry.timer);
      this.#queue.splice(this.#queue.indexOf(entry), 1);
      entry.state = 'ended';
      entry.sequence.end = how;
      const cancelled = new SequenceCancelled('the request was cancelled while it waited', {
        operation: 'Scheduler',
        argument: 'request',
      });
      entry.refuse(cancelled);
      entry.channel.end(cancelled);
      this.#observer?.ended(how, 0, 0);
      return;
    }
    if (this.#inStep.has(entry)) {
      // The engine is stepping it: its room comes back as the step returns.
      entry.releaseAfterStep = true;
      this.#endEntry(entry, how);
    } else {
      this.#endEntry(entry, how);
      this.#release(entry);
    }
  }

  /** Marks `entry` ended and closes its channel (with `error` when it failed). */
  #endEntry(entry: Entry, how: SequenceEnd, error?: unknown): void {
    entry.state = 'ended';
    entry.sequence.end = how;
    entry.channel.end(
      how === 'cancelled'
        ? new SequenceCancelled('the request was cancelled', { operation: 'Scheduler', argument: 'request' })
        : error,
    );
    this.#observer?.ended(how, entry.sequence.request.promptIds.length, entry.sequence.generated);
  }

  #release(entry: Entry): void {
    this.#active.splice(this.#active.indexOf(entry), 1);
    this.engine.release(entry.engineSequence);
  }

  #kick(): void {
    if (this.#looping) return;
    this.#looping = true;
    void this.#loop();
  }

  async #loop(): Promise<void> {
    try {
      for (;;) {
        await nextTurn();
        this.#admitFromQueue();
        if (this.#active.length === 0) {
          // Nothing runs, so the engine is as empty as it gets: the head can never fit.
          const head = this.#queue.shift();
          if (!head) return;
          const { promptIds, maxNewTokens } = head.sequence.request;
          this.#failQueued(
            head,
            new InvalidArgumentError('the request does not fit the engine', {
              operation: 'Scheduler',
              argument: 'request',
              expected: 'a request an empty engine admits',
              actual: `${promptIds.length} prompt tokens, maxNewTokens ${maxNewTokens}`,
            }),
          );
          continue;
        }
        await this.#step();
      }
    } finally {
      this.#looping = false;
      if (this.#active.length === 0 && this.#queue.length === 0) {
        for (const wake of this.#idleWaiters.splice(0)) wake();
      } else {
        this.#kick();
      }
    }
  }

  /** Admits from the head of the queue while there is room (FIFO: none skips the head). */
  #admitFromQueue(): void {
    while (this.#queue.length > 0) {
      const head = this.#queue[0]!;
      let admitted: boolean;
      try {
        admitted = this.#tryAdmit(head);
      } catch (error) {
        // An engine that refuses the request outright fails it alone.
        this.#queue.shift();
        this.#failQueued(head, error);
        continue;
      }
      if (!admitted) return;
      this.#queue.shift();
    }
  }

  /** Ends a request taken off the queue with `error`. */
  #failQueued(entry: Entry, error: unknown): void {
    clearTimeout(entry.timer);
    entry.state = 'ended';
    entry.sequence.end = 'failed';
    entry.refuse(error instanceof Error ? error : new Error(String(error)));
    entry.channel.end(error);
    this.#observer?.ended('failed', 0, 0);
  }

  async #step(): Promise<void> {
    const batch = [...this.#active];
    this.#inStep = new Set(batch);
    let results: readonly StepResult[];
    try {
      results = await this.engine.step(batch.map((e) => e.engineSequence));
    } catch (error) {
      this.#inStep = new Set();
      for (const entry of batch) {
        if (entry.state !== 'ended') this.#endEntry(entry, 'failed', error);
        this.#release(entry);
      }
      return;
    }
    this.#inStep = new Set();
    for (const [i, entry] of batch.entries()) {
      if (entry.state === 'ended') {
        if (entry.releaseAfterStep) this.#release(entry);
        continue;
      }
      const result = results[i]!;
      // Its prompt (or a preempted cache) is still being run: no token yet.
      if ('pending' in result) continue;
      if (!('token' in result)) {
        this.#endEntry(entry, 'stop-token');
        this.#release(entry);
        continue;
      }
      const sequence = entry.sequence;
      if (sequence.generated++ === 0) this.#observer?.firstToken(performance.now() - entry.submittedAt);
      this.#observer?.token();
      entry.channel.push(result.token);
      if (sequence.generated >= sequence.request.maxNewTokens) {
        this.#endEntry(entry, 'length');
        this.#release(entry);
      }
    }
  }
}
