import { InvalidArgumentError } from '@rayo/core';
import { Rng } from '@rayo/train';

/**
 * English first names as a character-level corpus: the names lowercased and
 * deduplicated, split by a seed into training and validation names, and
 * each split written as one stream of characters with a separator before
 * every name, so that every target a model predicts is a real character or
 * the end of a real name.
 */

/** Ends (and starts) every name in a stream. */
export const SEPARATOR = '.';

/** The characters of a corpus and their ids: the separator is id 0, then the rest in code-point order. */
export class Vocabulary {
  readonly chars: readonly string[];
  readonly #ids: ReadonlyMap<string, number>;

  constructor(texts: Iterable<string>) {
    const seen = new Set<string>();
    for (const text of texts) for (const ch of text) if (ch !== SEPARATOR) seen.add(ch);
    this.chars = [SEPARATOR, ...[...seen].sort()];
    this.#ids = new Map(this.chars.map((ch, i) => [ch, i]));
  }

  get size(): number {
    return this.chars.length;
  }

  id(ch: string): number {
    const id = this.#ids.get(ch);
    if (id === undefined) {
      throw new InvalidArgumentError('a character outside the vocabulary', {
        operation: 'names',
        argument: 'text',
        expected: `one of ${JSON.stringify(this.chars.join(''))}`,
        actual: JSON.stringify(ch),
      });
    }
    return id;
  }

  /** The ids of `.name.name…`: a separator before every name and after the last. */
  encode(names: readonly string[]): Int32Array {
    const ids: number[] = [0];
    for (const name of names) {
      for (const ch of name) ids.push(this.id(ch));
      ids.push(0);
    }
    return Int32Array.from(ids);
  }

  decode(ids: Iterable<number>): string {
    let text = '';
    for (const id of ids) text += this.chars[id] ?? '?';
    return text;
  }
}

export interface NameSplit {
  readonly train: readonly string[];
  readonly validation: readonly string[];
}

/** Lowercases, removes duplicates and splits `names` by `seed`: a `validationFraction` of them validate. */
export function splitNames(names: Iterable<string>, seed: number, validationFraction = 0.1): NameSplit {
  if (!(validationFraction > 0 && validationFraction < 1)) {
    throw new InvalidArgumentError('the validation share must leave names on both sides', {
      operation: 'names',
      argument: 'validationFraction',
      expected: 'a number in (0, 1)',
      actual: String(validationFraction),
    });
  }
  const unique = [...new Set([...names].map((n) => n.trim().toLowerCase()).filter((n) => n !== ''))].sort();
  const order = new Rng(seed).permutation(unique.length);
  const shuffled = Array.from(order, (i) => unique[i]!);
  const count = Math.max(1, Math.round(unique.length * validationFraction));
  return { validation: shuffled.slice(0, count), train: shuffled.slice(count) };
}

/** `count` windows of `length` + 1 ids from `stream`, starting at random offsets drawn from `rng`. */
export function randomWindows(stream: Int32Array, length: number, count: number, rng: Rng): Int32Array[] {
  if (stream.length < length + 1) {
    throw new InvalidArgumentError('the stream is shorter than one window', {
      operation: 'names',
      argument: 'length',
      expected: `at most ${stream.length - 1}`,
      actual: String(length),
    });
  }
  return Array.from({ length: count }, () => {
    const start = rng.int(stream.length - length);
    return stream.subarray(start, start + length + 1);
  });
}

/**
 * Windows that hold every target of `stream` exactly once: non-overlapping
 * windows of `length` + 1 ids, then one shorter window for the rest.
 */
export function coveringWindows(stream: Int32Array, length: number): Int32Array[] {
  const windows: Int32Array[] = [];
  for (let start = 0; start + 1 < stream.length; start += length) {
    windows.push(stream.subarray(start, Math.min(start + length + 1, stream.length)));
  }
  return windows;
}

/**
 * Inputs and targets of a batch in the layout CausalLM takes: `ids` [T, B]
 * (time-major) and `targets` [T·B], the next id of each input. Every window
 * holds `length` + 1 ids.
 */
export function batchLayout(
  windows: readonly Int32Array[],
  length: number,
): { ids: Int32Array; targets: Int32Array } {
  const b = windows.length;
  const ids = new Int32Array(length * b);
  const targets = new Int32Array(length * b);
  windows.forEach((w, j) => {
    if (w.length !== length + 1) {
      throw new InvalidArgumentError('a window of the wrong length', {
        operation: 'names',
        argument: `windows[${j}]`,
        expected: `${length + 1} ids`,
        actual: `${w.length} ids`,
      });
    }
    for (let t = 0; t < length; t++) {
      ids[t * b + j] = w[t]!;
      targets[t * b + j] = w[t + 1]!;
    }
  });
  return { ids, targets };
}
