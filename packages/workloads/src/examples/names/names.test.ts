import {
  type Backend,
  createBackend,
  createCpuBackend,
  InvalidArgumentError,
  probeBackends,
} from '@rayo/core';
import { Rng, Tape } from '@rayo/train';
import { afterAll, describe, expect, it } from 'vitest';
import { firstNames } from './corpus.js';
import { batchLayout, coveringWindows, randomWindows, SEPARATOR, splitNames, Vocabulary } from './data.js';
import { causalLMDecoder } from './decoder.js';
import { lossCurveSvg } from './lossCurve.js';
import { type NamesSettings, sampleNames, streamLoss, trainNames } from './train.js';

describe('the names corpus', () => {
  it('holds both lists, and splits them 90/10 by the seed into disjoint lowercase sets', () => {
    const names = firstNames();
    expect(names.length).toBeGreaterThan(8000);
    const split = splitNames(names, 0);
    const all = new Set([...split.train, ...split.validation]);
    expect(all.size).toBe(split.train.length + split.validation.length);
    expect(split.validation.length).toBe(Math.round(all.size * 0.1));
    for (const name of all) expect(name).toMatch(/^[a-z-]+$/);
    expect(splitNames(names, 0)).toEqual(split);
    expect(splitNames(names, 1).validation).not.toEqual(split.validation);
    expect(() => splitNames(names, 0, 1)).toThrow(InvalidArgumentError);
  });

  it('encodes a separator before every name and after the last, and decodes back', () => {
    const vocab = new Vocabulary(['bob', 'ann-marie']);
    expect(vocab.chars).toEqual([SEPARATOR, '-', 'a', 'b', 'e', 'i', 'm', 'n', 'o', 'r']);
    const stream = vocab.encode(['bob', 'ann']);
    expect(Array.from(stream)).toEqual([0, 3, 8, 3, 0, 2, 7, 7, 0]);
    expect(vocab.decode(stream)).toBe('.bob.ann.');
    expect(() => vocab.encode(['zed'])).toThrow(/outside the vocabulary/);
  });

  it('lays windows out time-major with each input’s next id as its target', () => {
    const stream = Int32Array.from({ length: 20 }, (_, i) => i);
    const windows = randomWindows(stream, 4, 3, new Rng(7));
    expect(randomWindows(stream, 4, 3, new Rng(7))).toEqual(windows);
    const { ids, targets } = batchLayout(windows, 4);
    for (let t = 0; t < 4; t++) {
      for (let b = 0; b < 3; b++) {
        expect(ids[t * 3 + b]).toBe(windows[b]![t]);
        expect(targets[t * 3 + b]).toBe(ids[t * 3 + b]! + 1);
      }
    }
    expect(() => batchLayout([stream.subarray(0, 3)], 4)).toThrow(/wrong length/);
    expect(() => randomWindows(stream, 20, 1, new Rng(0))).toThrow(/shorter than one window/);
  });

  it('covers every target of a stream exactly once for validation', () => {
    const stream = Int32Array.from({ length: 23 }, (_, i) => i);
    const windows = coveringWindows(stream, 5);
    const targets = windows.flatMap((w) => Array.from(w.subarray(1)));
    expect(targets).toEqual(Array.from({ length: 22 }, (_, i) => i + 1));
    expect(windows.map((w) => w.length)).toEqual([6, 6, 6, 6, 3]);
  });
});

describe('the loss curve', () => {
  it('draws each series, its legend and the target as one SVG document', () => {
    const svg = lossCurveSvg(
      'a <title>',
      [
        {
          name: 'training',
          color: '#1f77b4',
          points: [
            { step: 10, loss: 3 },
            { step: 20, loss: 2.5 },
          ],
        },
        { name: 'validation', color: '#d62728', points: [{ step: 20, loss: 2.6 }] },
      ],
      2.05,
    );
    expect(svg.startsWith('<svg xmlns="http://www.w3.org/2000/svg"')).toBe(true);
    expect(svg.trimEnd().endsWith('</svg>')).toBe(true);
    expect(svg).toContain('a &#60;title&#62;');
    expect(svg.match(/<path /g)).toHaveLength(2);
    expect(svg).toContain('>target 2.05</text>');
    expect(svg).toContain('>validation</text>');
  });
});

// A few steps of a tiny model: the loss must fall on every backend CI runs.
const TINY: NamesSettings = {
  dim: 32,
  heads: 2,
  blocks: 1,
  hidden: 64,
  embedStd: 0.5,
  context: 16,
  batch: 16,
  steps: 40,
  lr: 1e-2,
  weightDecay: 0.1,
  evalEvery: 20,
  seed: 3,
  validationFraction: 0.1,
  precision: 'f32',
};

const wgpu = (await probeBackends(['wgpu']))[0]!;
// Under CI the wgpu backend must be there (Mesa lavapipe): a missing adapter fails the test.
const backends: [string, () => Promise<Backend>][] = [['cpu', async () => createCpuBackend()]];
if (wgpu.available || process.env.CI === 'true') backends.push(['wgpu', () => createBackend('wgpu')]);

describe.each(backends)('training on %s', (_name, open) => {
  const opened: Backend[] = [];
  afterAll(() => {
    for (const b of opened) b.dispose();
  });

  it('lowers the training and the validation loss within a few steps, and samples names of its characters', async () => {
    const backend = await open();
    opened.push(backend);
    const run = await trainNames(backend, firstNames(), TINY, { progress: false });
    const validationStream = run.vocab.encode(run.split.validation);
    const { train, validation } = run.curve;
    expect(validation.map((v) => v.step)).toEqual([20, 40]);
    // Near log(vocabulary) at first; clearly lower after 40 steps.
    expect(train[0]!.loss).toBeGreaterThan(Math.log(run.vocab.size) - 0.5);
    expect(train.at(-1)!.loss).toBeLessThan(train[0]!.loss - 0.4);
    expect(validation.at(-1)!.loss).toBeLessThan(train[0]!.loss - 0.4);
    expect(run.best.loss).toBe(Math.min(...validation.map((v) => v.loss)));
    // The evaluation is the stream loss of the final model, over every validation character.
    const again = await streamLoss(backend, run.model, validationStream, TINY.context, 7);
    expect(again).toBeCloseTo(validation.at(-1)!.loss, 4);
    const samples = await sampleNames(run.model, run.vocab, { count: 5, seed: 1 });
    expect(samples).toHaveLength(5);
    for (const s of samples) expect(s).toMatch(/^[a-z-]{0,20}$/);
    expect(await sampleNames(run.model, run.vocab, { count: 5, seed: 1 })).toEqual(samples);
    // The KV-cache decoder computes what the trained model computes.
    const prompt = Array.from(run.vocab.encode(['anna', 'bob']));
    using input = backend.upload(Int32Array.from(prompt), [prompt.length, 1], 'i32');
    using tape = new Tape(backend, { grad: false });
    const trained = await run.model.forward(tape, input).value.read();
    const decoder = causalLMDecoder(run.model, prompt.length);
    using logits = decoder.prefill(prompt);
    const decoded = await logits.read();
    decoder.dispose();
    let max = 0;
    for (let i = 0; i < trained.length; i++) max = Math.max(max, Math.abs(trained[i]! - decoded[i]!));
    expect(max).toBeLessThan(1e-4);
    run.model.dispose();
    // A software adapter on a loaded machine has taken 150 s to compile one of its pipelines.
  }, 600_000);
});

describe("training under the 'bf16' and 'f16' policies", () => {
  // TINY with less work: half the windows, one validation loss at the end over 3% of the names.
  const settings: NamesSettings = { ...TINY, batch: 8, steps: 30, evalEvery: 30, validationFraction: 0.03 };

  it('each reaches the f32 validation loss within 1% on cpu', async () => {
    const backend = createCpuBackend();
    try {
      const runs = [];
      for (const precision of ['f32', 'bf16', 'f16'] as const) {
        const run = await trainNames(backend, firstNames(), { ...settings, precision }, { progress: false });
        expect(run.model.head.precision).toBe(precision);
        runs.push(run.curve.validation.at(-1)!.loss);
        run.model.dispose();
      }
      const [f32, bf16, f16] = runs as [number, number, number];
      // It learned (well under log 28), and the rounding changed the numbers.
      expect(f32).toBeLessThan(Math.log(28) - 0.4);
      expect(bf16).not.toBe(f32);
      expect(Math.abs(bf16 - f32)).toBeLessThan(0.01 * f32);
      // f16 (with its loss scaler) keeps 3 more bits than bf16.
      expect(f16).not.toBe(f32);
      expect(Math.abs(f16 - f32)).toBeLessThan(0.01 * f32);
    } finally {
      backend.dispose();
    }
  }, 60_000);
});
