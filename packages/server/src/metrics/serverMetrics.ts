import type { EngineUsage, PageUsage } from '../engine/decodeEngine.js';
import type { SchedulerObserver, SequenceEnd } from '../scheduler/scheduler.js';
import type { RefusalReason, SchedulerRefusal } from '../scheduler/schedulerErrors.js';
import { type Metric, prometheusText } from './prometheus.js';

/** Times to first token kept for the percentiles: the most recent ones. */
const TTFT_WINDOW = 1024;
/** Tokens per second is measured over this many of the last whole seconds. */
const RATE_SECONDS = 10;
const QUANTILES = [0.5, 0.9, 0.99];

/** What the scheduler holds now, read when the metrics are rendered. */
export interface SchedulerGauges {
  readonly queued: number;
  readonly active: number;
  readonly engine: EngineUsage;
}

/**
 * Counters of the server's work, fed by the scheduler (as its observer) and
 * the HTTP layer, rendered for `GET /metrics` in Prometheus' text format.
 */
export class ServerMetrics implements SchedulerObserver {
  promptTokens = 0;
  generatedTokens = 0;
  readonly endings: Record<SequenceEnd, number> = {
    'stop-token': 0,
    length: 0,
    'stop-string': 0,
    cancelled: 0,
    failed: 0,
  };
  readonly refusals: Record<RefusalReason, number> = {
    'queue-full': 0,
    'queue-timeout': 0,
    'shutting-down': 0,
  };
  /** Responses by route and status, keyed `route status`. */
  readonly responses = new Map<string, number>();
  readonly #ttftMs: number[] = [];
  #ttftSumMs = 0;
  #ttftCount = 0;
  /** Tokens made in each of the last seconds: [second, count], oldest first. */
  readonly #perSecond: [number, number][] = [];

  firstToken(waitedMs: number): void {
    this.#ttftMs.push(waitedMs);
    if (this.#ttftMs.length > TTFT_WINDOW) this.#ttftMs.shift();
    this.#ttftSumMs += waitedMs;
    this.#ttftCount++;
  }

  token(): void {
    this.generatedTokens++;
    const second = Math.floor(performance.now() / 1000);
    const last = this.#perSecond.at(-1);
    if (last?.[0] === second) last[1]++;
    else this.#perSecond.push([second, 1]);
    while (this.#perSecond.length > RATE_SECONDS + 1) this.#perSecond.shift();
  }

  ended(how: SequenceEnd, promptTokens: number): void {
    this.endings[how]++;
    this.promptTokens += promptTokens;
  }

  refused(refusal: SchedulerRefusal): void {
    this.refusals[refusal.reason]++;
  }

  /** Counts a response by its route (a known one, else `other`) and HTTP status. */
  responded(route: string, status: number): void {
    const key = `${route} ${status}`;
    this.responses.set(key, (this.responses.get(key) ?? 0) + 1);
  }

  /** Generated tokens per second over the last whole seconds. */
  tokensPerSecond(): number {
    const now = Math.floor(performance.now() / 1000);
    const tokens = this.#perSecond
      .filter(([s]) => s < now && s >= now - RATE_SECONDS)
      .reduce((sum, [, n]) => sum + n, 0);
    return tokens / RATE_SECONDS;
  }

  /** The `q` quantile (nearest rank) of the recent times to first token, in seconds; NaN before any. */
  timeToFirstToken(q: number): number {
    if (this.#ttftMs.length === 0) return Number.NaN;
    const sorted = [...this.#ttftMs].sort((a, b) => a - b);
    return sorted[Math.min(sorted.length - 1, Math.ceil(q * sorted.length) - 1)]! / 1000;
  }

  render(gauges: SchedulerGauges): string {
    const metrics: Metric[] = [
      gauge('rayo_queue_depth', 'Requests waiting for admission.', gauges.queued),
      gauge('rayo_active_sequences', 'Sequences admitted and decoding.', gauges.active),
      gauge('rayo_engine_sequences', 'Sequences the engine holds.', gauges.engine.sequences),
      gauge('rayo_engine_max_sequences', 'Sequences the engine can hold.', gauges.engine.maxSequences),
      gauge(
        'rayo_kv_cache_rows_in_use',
        'KV cache rows held by admitted sequences.',
        gauges.engine.cacheRows,
      ),
      gauge('rayo_kv_cache_rows', 'KV cache rows in all.', gauges.engine.maxCacheRows),
      ...pageMetrics(gauges.engine.pages),
      counter(
        'rayo_prompt_tokens_total',
        'Prompt tokens of sequences that ran (once they end).',
        this.promptTokens,
      ),
      counter('rayo_generated_tokens_total', 'Tokens generated.', this.generatedTokens),
      gauge(
        'rayo_tokens_per_second',
        `Tokens generated per second over the last ${RATE_SECONDS} s.`,
        this.tokensPerSecond(),
      ),
      {
        name: 'rayo_sequences_ended_total',
        help: 'Sequences ended, by how.',
        type: 'counter',
        samples: Object.entries(this.endings).map(([reason, value]) => ({ value, labels: { reason } })),
      },
      {
        name: 'rayo_requests_refused_total',
        help: 'Requests the scheduler refused, by why.',
        type: 'counter',
        samples: Object.entries(this.refusals).map(([reason, value]) => ({ value, labels: { reason } })),
      },
      {
        name: 'rayo_http_responses_total',
        help: 'Responses by route and HTTP status.',
        type: 'counter',
        samples: [...this.responses].map(([key, value]) => {
          const [route = '', status = ''] = key.split(' ');
          return { value, labels: { route, status } };
        }),
      },
      {
        name: 'rayo_time_to_first_token_seconds',
        help: `From submission to the first token, over the last ${TTFT_WINDOW} sequences.`,
        type: 'summary',
        samples: [
          ...QUANTILES.map((q) => ({ value: this.timeToFirstToken(q), labels: { quantile: String(q) } })),
          { value: this.#ttftSumMs / 1000, suffix: '_sum' },
          { value: this.#ttftCount, suffix: '_count' },
        ],
      },
    ];
    return prometheusText(metrics);
  }
}

/** A paged engine's pages (none for an engine of whole slots). */
function pageMetrics(pages: PageUsage | undefined): Metric[] {
  if (!pages) return [];
  return [
    gauge('rayo_kv_cache_pages_in_use', 'KV cache pages held by admitted sequences.', pages.inUse),
    gauge('rayo_kv_cache_pages_free', 'KV cache pages free.', pages.free),
    gauge('rayo_kv_cache_page_rows', 'Rows of a KV cache page.', pages.pageSize),
    counter(
      'rayo_preemptions_total',
      "Sequences whose pages were taken for another's growth (their cache is recomputed).",
      pages.preemptions,
    ),
  ];
}

function gauge(name: string, help: string, value: number): Metric {
  return { name, help, type: 'gauge', samples: [{ value }] };
}

function counter(name: string, help: string, value: number): Metric {
  return { name, help, type: 'counter', samples: [{ value }] };
}
