import { InvalidArgumentError } from '@rayo/core';

/**
 * A small seeded generator (sfc32, seeded through splitmix32): the same seed
 * gives the same numbers on every platform, so initialisation and data order
 * are reproducible.
 */
export class Rng {
  #a: number;
  #b: number;
  #c: number;
  #d: number;
  #spare: number | undefined;

  constructor(seed: number) {
    if (!Number.isInteger(seed)) {
      throw new InvalidArgumentError('seed must be an integer', {
        operation: 'Rng',
        argument: 'seed',
        expected: 'an integer',
        actual: String(seed),
      });
    }
    let s = seed >>> 0;
    const next = (): number => {
      s = (s + 0x9e3779b9) >>> 0;
      let z = s;
      z = Math.imul(z ^ (z >>> 16), 0x85ebca6b);
      z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35);
      return (z ^ (z >>> 16)) >>> 0;
    };
    this.#a = next();
    this.#b = next();
    this.#c = next();
    this.#d = next();
    for (let i = 0; i < 12; i++) this.uint32();
  }

  /** A uniform 32-bit unsigned integer. */
  uint32(): number {
    const a = this.#a;
    const b = this.#b;
    const c = this.#c;
    const d = this.#d;
    const t = (((a + b) >>> 0) + d) >>> 0;
    this.#d = (d + 1) >>> 0;
    this.#a = b ^ (b >>> 9);
    this.#b = (c + (c << 3)) >>> 0;
    this.#c = (((c << 21) | (c >>> 11)) + t) >>> 0;
    return t;
  }

  /** Uniform in [0, 1). */
  next(): number {
    return this.uint32() / 2 ** 32;
  }

  /** Uniform in [low, high). */
  uniform(low: number, high: number): number {
    return low + (high - low) * this.next();
  }

  /** An integer in [0, n). */
  int(n: number): number {
    return Math.floor(this.next() * n);
  }

  /** Standard normal (Box–Muller). */
  normal(): number {
    if (this.#spare !== undefined) {
      const z = this.#spare;
      this.#spare = undefined;
      return z;
    }
    const u = 1 - this.next();
    const v = this.next();
    const r = Math.sqrt(-2 * Math.log(u));
    this.#spare = r * Math.sin(2 * Math.PI * v);
    return r * Math.cos(2 * Math.PI * v);
  }

  /** A new generator seeded from this one: for independent streams. */
  fork(): Rng {
    return new Rng(this.uint32());
  }

  /** `length` values uniform in [low, high), as f32. */
  uniformArray(length: number, low: number, high: number): Float32Array {
    return this.fillUniform(new Float32Array(length), low, high);
  }

  /**
   * Fills `out` with values uniform in [low, high): the numbers `uniform`
   * would give one by one, from the generator's state kept in locals, which
   * is many times faster (seeding a model of billions of weights).
   */
  fillUniform(out: Float32Array, low: number, high: number): Float32Array {
    let a = this.#a;
    let b = this.#b;
    let c = this.#c;
    let d = this.#d;
    const span = high - low;
    for (let i = 0; i < out.length; i++) {
      const t = (((a + b) >>> 0) + d) >>> 0;
      d = (d + 1) >>> 0;
      a = b ^ (b >>> 9);
      b = (c + (c << 3)) >>> 0;
      c = (((c << 21) | (c >>> 11)) + t) >>> 0;
      out[i] = low + span * (t / 2 ** 32);
    }
    this.#a = a;
    this.#b = b;
    this.#c = c;
    this.#d = d;
    return out;
  }

  /** `length` normal values of the given standard deviation, as f32. */
  normalArray(length: number, std = 1): Float32Array {
    const out = new Float32Array(length);
    for (let i = 0; i < length; i++) out[i] = std * this.normal();
    return out;
  }

  /** A permutation of [0, n) (Fisher–Yates). */
  permutation(n: number): Int32Array {
    const p = new Int32Array(n);
    for (let i = 0; i < n; i++) p[i] = i;
    for (let i = n - 1; i > 0; i--) {
      const j = this.int(i + 1);
      const t = p[i]!;
      p[i] = p[j]!;
      p[j] = t;
    }
    return p;
  }
}
