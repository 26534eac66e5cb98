/** Where progress goes: a stream like `process.stderr`. */
export interface ProgressStream {
  write(text: string): unknown;
  readonly isTTY?: boolean;
  readonly columns?: number;
}

export interface ProgressOptions {
  /** Total steps. */
  readonly total: number;
  /** Default: `process.stderr` in Node, nothing elsewhere. */
  readonly stream?: ProgressStream;
  readonly label?: string;
  /** Steps between plain lines when the stream is not a terminal (default: a twentieth of the run). */
  readonly every?: number;
  /** Redraws per second on a terminal (default 10). */
  readonly fps?: number;
}

export type ProgressFields = Readonly<Record<string, number | string | undefined>>;

function defaultStream(): ProgressStream | undefined {
  return typeof process !== 'undefined' && process.stderr ? process.stderr : undefined;
}

function formatValue(value: number | string): string {
  if (typeof value === 'string') return value;
  if (Number.isInteger(value)) return String(value);
  const abs = Math.abs(value);
  return abs !== 0 && (abs < 1e-3 || abs >= 1e5) ? value.toExponential(2) : value.toFixed(4);
}

export function formatDuration(seconds: number): string {
  if (!Number.isFinite(seconds)) return '?';
  const s = Math.round(seconds);
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m${String(s % 60).padStart(2, '0')}s`;
  return `${Math.floor(s / 3600)}h${String(Math.floor((s % 3600) / 60)).padStart(2, '0')}m`;
}

/**
 * A progress bar with the loss and the step rate: redrawn in place on a
 * terminal, plain lines otherwise (logs, CI).
 */
export class ProgressBar {
  readonly total: number;
  readonly #stream: ProgressStream | undefined;
  readonly #label: string;
  readonly #every: number;
  readonly #interval: number;
  readonly #start = performance.now();
  #startStep = 0;
  #lastDraw = 0;
  #drawn = false;
  #fields: ProgressFields = {};
  #step = 0;

  constructor(options: ProgressOptions) {
    this.total = options.total;
    this.#stream = options.stream ?? defaultStream();
    this.#label = options.label ?? 'train';
    this.#every = options.every ?? Math.max(1, Math.round(options.total / 20));
    this.#interval = 1000 / (options.fps ?? 10);
  }

  get isTTY(): boolean {
    return this.#stream?.isTTY === true;
  }

  /** Marks where a resumed run started, so the rate counts only this run's steps. */
  start(step: number): void {
    this.#startStep = step;
    this.#step = step;
  }

  /** Steps per second in this run. */
  rate(): number {
    const seconds = (performance.now() - this.#start) / 1000;
    return seconds > 0 ? (this.#step - this.#startStep) / seconds : 0;
  }

  #line(): string {
    const { total } = this;
    const step = this.#step;
    const rate = this.rate();
    const eta = rate > 0 ? (total - step) / rate : Number.POSITIVE_INFINITY;
    const fields = Object.entries(this.#fields)
      .filter(([, v]) => v !== undefined)
      .map(([k, v]) => `${k} ${formatValue(v!)}`)
      .join('  ');
    const stats = `${step}/${total}  ${fields}${fields ? '  ' : ''}${rate.toFixed(2)} step/s  eta ${formatDuration(eta)}`;
    if (!this.isTTY) return `${this.#label} ${stats}`;
    const width = Math.max(
      10,
      Math.min(30, (this.#stream?.columns ?? 80) - stats.length - this.#label.length - 6),
    );
    const filled = total > 0 ? Math.round((width * step) / total) : width;
    return `${this.#label} [${'#'.repeat(filled)}${'.'.repeat(width - filled)}] ${stats}`;
  }

  /** Records that `step` steps are done, with fields such as the loss. */
  update(step: number, fields: ProgressFields = {}): void {
    this.#step = step;
    this.#fields = { ...this.#fields, ...fields };
    const stream = this.#stream;
    if (!stream) return;
    const now = performance.now();
    if (this.isTTY) {
      if (now - this.#lastDraw < this.#interval && step < this.total) return;
      this.#lastDraw = now;
      stream.write(`\r\x1b[2K${this.#line()}`);
      this.#drawn = true;
    } else if (step % this.#every === 0 || step === this.total) {
      stream.write(`${this.#line()}\n`);
    }
  }

  /** Prints a line (an evaluation, a checkpoint) without breaking the bar. */
  log(message: string): void {
    const stream = this.#stream;
    if (!stream) return;
    if (this.isTTY && this.#drawn) stream.write(`\r\x1b[2K${message}\n${this.#line()}`);
    else stream.write(`${message}\n`);
  }

  /** Ends the bar's line. */
  finish(): void {
    if (this.isTTY && this.#drawn) this.#stream?.write(`\r\x1b[2K${this.#line()}\n`);
    this.#drawn = false;
  }
}
