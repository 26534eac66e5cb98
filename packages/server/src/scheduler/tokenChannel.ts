/**
 * Tokens pushed by the scheduler loop and pulled by one reader: an async
 * iterable that ends when the sequence ends, or throws its error.
 */
export class TokenChannel implements AsyncIterable<number> {
  readonly #buffered: number[] = [];
  #ended = false;
  #error: unknown;
  #wake: (() => void) | undefined;

  push(token: number): void {
    this.#buffered.push(token);
    this.#notify();
  }

  end(error?: unknown): void {
    if (this.#ended) return;
    this.#ended = true;
    this.#error = error;
    this.#notify();
  }

  #notify(): void {
    const wake = this.#wake;
    this.#wake = undefined;
    wake?.();
  }

  async *[Symbol.asyncIterator](): AsyncGenerator<number, void, undefined> {
    for (;;) {
      while (this.#buffered.length > 0) yield this.#buffered.shift()!;
      if (this.#ended) {
        if (this.#error !== undefined) throw this.#error;
        return;
      }
      await new Promise<void>((resolve) => {
        this.#wake = resolve;
      });
    }
  }
}
