import { readFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';

/** Images as rows of 784 values in [0, 1], and their digits. */
export interface MnistSplit {
  readonly images: Float32Array;
  readonly labels: Int32Array;
  readonly count: number;
}

export const PIXELS = 28 * 28;

/**
 * The digits the `mnist` package ships (10 000 of them, about a thousand per
 * digit), split without randomness: every fifth sample of each digit is a test
 * sample, the rest train.
 */
export async function loadMnist(): Promise<{ train: MnistSplit; test: MnistSplit }> {
  const root = dirname(createRequire(import.meta.url).resolve('mnist/package.json'));
  const train: number[][] = [];
  const test: number[][] = [];
  const trainLabels: number[] = [];
  const testLabels: number[] = [];
  for (let digit = 0; digit < 10; digit++) {
    const file = join(root, 'src', 'digits', `${digit}.json`);
    const { data } = JSON.parse(await readFile(file, 'utf8')) as { data: number[] };
    const samples = Math.floor(data.length / PIXELS);
    for (let i = 0; i < samples; i++) {
      const image = data.slice(i * PIXELS, (i + 1) * PIXELS);
      if (i % 5 === 0) {
        test.push(image);
        testLabels.push(digit);
      } else {
        train.push(image);
        trainLabels.push(digit);
      }
    }
  }
  const pack = (images: number[][], labels: number[]): MnistSplit => {
    const flat = new Float32Array(images.length * PIXELS);
    images.forEach((image, i) => {
      flat.set(image, i * PIXELS);
    });
    return { images: flat, labels: Int32Array.from(labels), count: images.length };
  };
  return { train: pack(train, trainLabels), test: pack(test, testLabels) };
}

/**
 * A copy of `images` with each image moved by a whole number of pixels, up to
 * `max` in each direction (drawn from `rng`); pixels moved in are 0. Small
 * shifts are a standard augmentation: an MLP has no translation invariance of
 * its own, and 8 000 digits are few.
 */
export function shiftImages(
  images: Float32Array,
  count: number,
  max: number,
  next: (n: number) => number,
): Float32Array {
  const out = new Float32Array(images.length);
  const side = 28;
  for (let n = 0; n < count; n++) {
    const dx = next(2 * max + 1) - max;
    const dy = next(2 * max + 1) - max;
    const base = n * PIXELS;
    for (let y = Math.max(0, dy); y < Math.min(side, side + dy); y++) {
      const from = base + (y - dy) * side;
      const to = base + y * side;
      for (let x = Math.max(0, dx); x < Math.min(side, side + dx); x++) out[to + x] = images[from + x - dx]!;
    }
  }
  return out;
}
