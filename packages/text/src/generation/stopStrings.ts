import { InvalidArgumentError } from '@rayo/core';

/**
 * Finds stop strings in streamed text. `push` returns the text that can be
 * shown: everything before a stop string once one appears, and otherwise all
 * but a tail that could still be the start of one (held until the next
 * delta tells). `flush` returns the held tail at the end.
 */
export class StopStrings {
  readonly #stops: readonly string[];
  #held = '';
  #stopped = false;

  constructor(stops: readonly string[]) {
    stops.forEach((s, i) => {
      if (typeof s !== 'string' || s.length === 0) {
        throw new InvalidArgumentError('a stop string must be a non-empty string', {
          operation: 'generateText',
          argument: `stop[${i}]`,
          expected: 'a non-empty string',
          actual: JSON.stringify(s) ?? String(s),
        });
      }
    });
    this.#stops = stops;
  }

  /** Whether a stop string has appeared. */
  get stopped(): boolean {
    return this.#stopped;
  }

  push(delta: string): string {
    if (this.#stopped) return '';
    const text = this.#held + delta;
    let first = -1;
    for (const stop of this.#stops) {
      const at = text.indexOf(stop);
      if (at >= 0 && (first < 0 || at < first)) first = at;
    }
    if (first >= 0) {
      this.#stopped = true;
      this.#held = '';
      return text.slice(0, first);
    }
    // The longest tail of the text that begins some stop string.
    let keep = 0;
    for (const stop of this.#stops) {
      for (let n = Math.min(stop.length - 1, text.length); n > keep; n--) {
        if (text.endsWith(stop.slice(0, n))) {
          keep = n;
          break;
        }
      }
    }
    this.#held = text.slice(text.length - keep);
    return text.slice(0, text.length - keep);
  }

  flush(): string {
    const held = this.#held;
    this.#held = '';
    return this.#stopped ? '' : held;
  }
}
