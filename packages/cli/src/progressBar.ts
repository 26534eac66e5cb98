import type { LoadProgress } from '@rayo/text';

const WIDTH = 24;

function gigabytes(bytes: number): string {
  if (bytes >= 1e9) return `${(bytes / 1e9).toFixed(2)} GB`;
  return bytes >= 1e6 ? `${(bytes / 1e6).toFixed(1)} MB` : `${(bytes / 1e3).toFixed(1)} kB`;
}

/**
 * The weights' loading progress on stderr: redrawn in place on a terminal,
 * one line at the start and one at the end otherwise (a log stays short).
 */
export class LoadProgressBar {
  readonly #stream: NodeJS.WritableStream & { readonly isTTY?: boolean };
  readonly #label: string;
  readonly #started = performance.now();
  #drawn = false;
  #linesWritten = new Set<string>();

  constructor(stream: NodeJS.WritableStream & { readonly isTTY?: boolean }, label: string) {
    this.#stream = stream;
    this.#label = label;
  }

  update(p: LoadProgress): void {
    const fraction =
      p.bytesTotal > 0
        ? p.bytesLoaded / p.bytesTotal
        : p.tensorsTotal > 0
          ? p.tensorsLoaded / p.tensorsTotal
          : 1;
    const filled = Math.round(fraction * WIDTH);
    const line =
      `${this.#label} [${'#'.repeat(filled)}${'.'.repeat(WIDTH - filled)}] ` +
      `${p.tensorsLoaded}/${p.tensorsTotal} tensors, ${gigabytes(p.bytesLoaded)} of ${gigabytes(p.bytesTotal)}`;
    if (this.#stream.isTTY) {
      this.#stream.write(`\r\x1b[2K${line}`);
      this.#drawn = true;
    } else {
      // A log gets the start and the end, once each.
      const stage = p.tensorsLoaded === 0 ? 'start' : p.tensorsLoaded === p.tensorsTotal ? 'end' : undefined;
      if (stage && !this.#linesWritten.has(stage)) {
        this.#linesWritten.add(stage);
        this.#stream.write(`${line}\n`);
      }
    }
  }

  /** Ends the bar with how long loading took. */
  done(): void {
    const seconds = (performance.now() - this.#started) / 1000;
    if (this.#drawn) this.#stream.write('\n');
    this.#stream.write(`loaded in ${seconds.toFixed(1)} s\n`);
  }

  /** Ends a bar cut short by an error. */
  abandon(): void {
    if (this.#drawn) this.#stream.write('\n');
  }
}
