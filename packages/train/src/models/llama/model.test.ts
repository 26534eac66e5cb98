import { type CommandBatch, createCpuBackend, type Tensor } from '@rayo/core';
import {
  expectReferenceGreedy,
  greedyAgainstReference,
  ModelScope,
  maxAbsDiff,
  maxRowDiff,
  modelTestBackends,
  referenceLogits,
  removeTinyLlamas,
  tinyLlamaConfig,
  tinyLlamaWeights,
  writeTinyLlama,
} from '@rayo/train-testkit';
import { afterAll, describe, expect, it } from 'vitest';
import { parseLlamaConfig } from './config.js';
import { LlamaModel } from './model.js';

/**
 * Tolerance on logits (|logit| up to about 3.5) against the f64 reference.
 * f32 rounding (2^-24 relative) accumulated over dot products of at most 91
 * terms through 2 blocks gives errors near 1e-6 (the largest seen on cpu and
 * lavapipe is 9e-7); backends differ in summation order and FMA use. 5e-5 is
 * fifty times that, and far below what a wrong position, head mapping, mask
 * or theta changes (0.01 and more).
 */
const TOLERANCE = 5e-5;

afterAll(removeTinyLlamas);

const PROMPT = [5, 17, 3, 96, 0, 42, 8];
/** Lavapipe compiles each pipeline on first use: the first wgpu test compiles the decoder's, over a minute on a loaded machine. */
const TIMEOUT = 180_000;

const backends = await modelTestBackends();

describe.each(backends)('Llama decoder on %s', (_name, create) => {
  const scope = new ModelScope(create);
  afterAll(scope.dispose);

  async function load(config: Record<string, unknown>, seed: number, shards = 1) {
    const weights = tinyLlamaWeights(config, seed);
    const dir = await writeTinyLlama(config, weights, { shards });
    const model = await LlamaModel.load(await scope.backend(), dir);
    scope.keep(model);
    return { model, weights };
  }

  for (const [label, overrides, shards] of [
    ['a single file, untied head', {}, 1],
    ['three shards with an index, tied head', { tie_word_embeddings: true }, 3],
    ['head_dim 8 apart from hidden_size, one kv head', { head_dim: 8, num_key_value_heads: 1 }, 1],
  ] as const) {
    it(
      `prefill and decode logits match the f64 reference (${label})`,
      async () => {
        const config = tinyLlamaConfig(overrides);
        const { model, weights } = await load(config, 1234, shards);
        const continuation = [61, 2, 77, 13, 40];
        const want = referenceLogits(config, weights, [...PROMPT, ...continuation]);
        using prefill = model.prefill(PROMPT);
        expect(prefill.shape).toEqual([PROMPT.length, 97]);
        const got = await prefill.read();
        expect(maxRowDiff(got, want.slice(0, PROMPT.length), 97)).toBeLessThan(TOLERANCE);
        for (const [i, token] of continuation.entries()) {
          using logits = model.decode(token);
          expect(logits.shape).toEqual([1, 97]);
          expect(maxAbsDiff(await logits.read(), want[PROMPT.length + i]!)).toBeLessThan(TOLERANCE);
        }
        expect(model.position).toBe(PROMPT.length + continuation.length);
      },
      TIMEOUT,
    );
  }

  it(
    'fused and unfused decode steps agree, and only the fused one runs the fused kernels',
    async () => {
      const config = tinyLlamaConfig();
      const { model, weights } = await load(config, 4321);
      const { backend } = model;
      const unfused = new LlamaModel(backend, model.config, model.weights, { fused: false, maxSequence: 32 });
      scope.keep(unfused);
      const continuation = [61, 2, 77];
      const want = referenceLogits(config, weights, [...PROMPT, ...continuation]);
      model.prefill(PROMPT).dispose();
      unfused.prefill(PROMPT).dispose();
      const kernels = (m: LlamaModel, token: number) => {
        const names: string[] = [];
        const original = backend.run.bind(backend);
        backend.run = ((spec, ...rest) => {
          names.push(spec.name);
          return original(spec, ...rest);
        }) as typeof backend.run;
        try {
          return { logits: m.decode(token), names };
        } finally {
          backend.run = original;
        }
      };
      for (const [i, token] of continuation.entries()) {
        const fused = kernels(model, token);
        const plain = kernels(unfused, token);
        const layers = config.num_hidden_layers as number;
        const count = (names: string[], name: string) => names.filter((n) => n === name).length;
        expect(count(fused.names, 'gateUpSwiglu')).toBe(layers);
        // The loaded q, k and v weights are fused: the norm and their one product in one launch
        // each layer; RoPE, the cache write and the attention in one (both models); the head.
        expect(model.weights.layers.every((l) => l.qkv && !l.q && !l.k && !l.v)).toBe(true);
        expect(count(fused.names, 'rmsNormMatmul')).toBe(layers + 1);
        for (const names of [fused.names, plain.names]) {
          expect(count(names, 'ropeAttention')).toBe(layers);
          expect(names).not.toContain('ropeKvScatter');
          expect(names).not.toContain('incrementalAttention');
        }
        for (const name of ['swiglu', 'rmsNorm', 'rope', 'kvCacheScatter', 'rmsNormMatmul3'])
          expect(fused.names).not.toContain(name);
        const fusedKernels = ['gateUpSwiglu', 'rmsNormMatmul', 'rmsNormMatmul3'];
        expect(fusedKernels.reduce((sum, name) => sum + count(plain.names, name), 0)).toBe(0);
        // The embedding, five kernels a layer instead of ten (both norms, one product, swiglu and
        // the attention's own launch folded away), and the head with its norm.
        expect(fused.names.length).toBe(1 + 5 * layers + 1);
        expect(plain.names.length - fused.names.length).toBe(4 * layers + 1);
        const got = await fused.logits.read();
        expect(maxAbsDiff(got, await plain.logits.read())).toBeLessThan(TOLERANCE);
        expect(maxAbsDiff(got, want[PROMPT.length + i]!)).toBeLessThan(TOLERANCE);
        fused.logits.dispose();
        plain.logits.dispose();
      }
    },
    TIMEOUT,
  );

  it(
    'prefills in chunks: a later chunk attends over the cache',
    async () => {
      const config = tinyLlamaConfig();
      const { model, weights } = await load(config, 1234);
      const want = referenceLogits(config, weights, PROMPT);
      model.prefill(PROMPT.slice(0, 3)).dispose();
      using rest = model.prefill(PROMPT.slice(3));
      const got = await rest.read();
      expect(maxRowDiff(got, want.slice(3), 97)).toBeLessThan(TOLERANCE);
    },
    TIMEOUT,
  );

  it(
    'runs a decode step recorded into a batch, and replays it with a new token',
    async () => {
      const config = tinyLlamaConfig();
      const { model, weights } = await load(config, 1234);
      const position = PROMPT.length;
      model.prefill(PROMPT).dispose();
      const batch = model.backend.batch();
      const made: Tensor[] = [];
      const logits = model.step(batch, position, made);
      for (const token of [61, 2]) {
        model.writeToken(token);
        await batch.submit();
        const want = referenceLogits(config, weights, [...PROMPT, token])[position]!;
        expect(maxAbsDiff(await logits.read(), want)).toBeLessThan(TOLERANCE);
      }
      for (const t of made) t.dispose();
    },
    TIMEOUT,
  );

  it(
    'generates greedily token for token like the reference',
    async () => {
      const config = tinyLlamaConfig();
      const { model, weights } = await load(config, 99);
      await expectReferenceGreedy(model, config, weights, PROMPT, 12, TOLERANCE);
    },
    TIMEOUT,
  );

  it(
    'replays the two recorded steps of greedy decoding for every token, the device advancing position and length',
    async () => {
      const config = tinyLlamaConfig();
      const { model, weights } = await load(config, 7);
      const { backend } = model;
      const batches: CommandBatch[] = [];
      const original = backend.batch.bind(backend);
      backend.batch = () => {
        const batch = original();
        batches.push(batch);
        return batch;
      };
      const writes = { position: 0, length: 0 };
      const write = backend.write.bind(backend);
      backend.write = (tensor, data) => {
        if (tensor === model.positionInput) writes.position++;
        if (tensor === model.lengthInput) writes.length++;
        write(tensor, data);
      };
      try {
        for (let round = 0; round < 2; round++) {
          const greedy = await greedyAgainstReference(model, config, weights, PROMPT, 10);
          expect(greedy.got).toEqual(greedy.want);
          // What was written between two generations is not relied on.
          write(model.positionInput, Int32Array.of(3));
          write(model.lengthInput, Int32Array.of(1));
        }
      } finally {
        backend.batch = original;
        backend.write = write;
      }
      // Recorded once (the two steps that feed each other their tokens), for both generations and all their tokens.
      expect(batches).toHaveLength(2);
      // The first step of each generation writes them; every later step finds them advanced by the one before.
      expect(writes).toEqual({ position: 2, length: 2 });
      // The same tokens with every step run eagerly.
      const eager = new LlamaModel(backend, model.config, model.weights, { replay: false, maxSequence: 32 });
      const greedy = await greedyAgainstReference(eager, config, weights, PROMPT, 10);
      expect(greedy.got).toEqual(greedy.want);
    },
    TIMEOUT,
  );
});

describe('generate', () => {
  const backend = createCpuBackend();
  const config = tinyLlamaConfig();
  const weights = tinyLlamaWeights(config, 99);
  const loading = writeTinyLlama(config, weights).then((dir) =>
    LlamaModel.load(backend, dir, { maxSequence: 20 }),
  );

  async function collect(tokens: AsyncIterable<number>): Promise<number[]> {
    const out: number[] = [];
    for await (const t of tokens) out.push(t);
    return out;
  }

  it('ends before a stop token, without yielding it', async () => {
    const model = await loading;
    const greedy = await collect(model.generate(PROMPT, { maxNewTokens: 8 }));
    const stopAt = greedy.findIndex((t, i) => i >= 2 && greedy.indexOf(t) === i);
    const stopped = await collect(model.generate(PROMPT, { maxNewTokens: 8, stop: [greedy[stopAt]!, 96] }));
    expect(stopped).toEqual(greedy.slice(0, stopAt));
    // The step queued after the stop token is not context: the tokens fed are the prompt and those yielded.
    expect(model.position).toBe(PROMPT.length + stopAt);
  });

  it('leaves the context at the tokens fed when the caller stops early, and decoding goes on from there', async () => {
    const model = await loading;
    const greedy = await collect(model.generate(PROMPT, { maxNewTokens: 8 }));
    const tokens = model.generate(PROMPT, { maxNewTokens: 8 });
    const got: number[] = [];
    for (let i = 0; i < 4; i++) got.push((await tokens.next()).value as number);
    await tokens.return();
    expect(got).toEqual(greedy.slice(0, 4));
    // Tokens 0–2 were fed back; token 3 was yielded but not fed.
    expect(model.position).toBe(PROMPT.length + 3);
    const logits = await model.decode(got[3]!).read();
    expect(logits.indexOf(Math.max(...logits))).toBe(greedy[4]);
  });

  it('samples the same tokens for the same seed, and restarts from an empty context each time', async () => {
    const model = await loading;
    const options = { maxNewTokens: 10, temperature: 1.5, seed: 3 };
    const first = await collect(model.generate(PROMPT, options));
    expect(await collect(model.generate(PROMPT, options))).toEqual(first);
    expect(await collect(model.generate(PROMPT, { ...options, seed: 4 }))).not.toEqual(first);
    // topK 1 is greedy at any temperature.
    expect(await collect(model.generate(PROMPT, { ...options, topK: 1 }))).toEqual(
      await collect(model.generate(PROMPT, { maxNewTokens: 10 })),
    );
  });

  it('refuses what does not fit or is not a token, before generating', async () => {
    const model = await loading;
    // 7 prompt tokens + 14 new − 1 (the last is never fed back) = 20 rows: fits; 15 does not.
    expect(await collect(model.generate(PROMPT, { maxNewTokens: 14 }))).toHaveLength(14);
    await expect(collect(model.generate(PROMPT, { maxNewTokens: 15 }))).rejects.toThrow(
      /do not fit in the cache/,
    );
    await expect(collect(model.generate([1, 97], { maxNewTokens: 1 }))).rejects.toThrow(/97 at index 1/);
    await expect(collect(model.generate([], { maxNewTokens: 1 }))).rejects.toThrow(/no tokens/);
    await expect(collect(model.generate(PROMPT, { maxNewTokens: -1 }))).rejects.toThrow(/maxNewTokens/);
    expect(await collect(model.generate(PROMPT, { maxNewTokens: 0 }))).toEqual([]);
    model.reset();
    model.prefill(Array.from({ length: 20 }, (_, i) => i)).dispose();
    expect(() => model.decode(1)).toThrow(/the context is full/);
  });

  it('refuses a second generation while one runs', async () => {
    const model = await loading;
    const first = model.generate(PROMPT, { maxNewTokens: 3 });
    await first.next();
    await expect(model.generate(PROMPT, { maxNewTokens: 1 }).next()).rejects.toThrow(/already generating/);
    await first.return();
    expect(await collect(model.generate(PROMPT, { maxNewTokens: 2 }))).toHaveLength(2);
  });
});

describe('LlamaModel checks', () => {
  const backend = createCpuBackend();

  it('leaves nothing behind, and frees each layer’s intermediates before the next layer', async () => {
    // Memory a prefill adds above what is live before it, for 2 and for 6 layers.
    const prefillPeak = async (layers: number) => {
      const config = tinyLlamaConfig({ num_hidden_layers: layers });
      const cpu = createCpuBackend();
      using model = await LlamaModel.load(cpu, await writeTinyLlama(config, tinyLlamaWeights(config, 1)));
      const before = cpu.memory();
      model.prefill(PROMPT).dispose();
      model.decode(3).dispose();
      const after = cpu.memory();
      expect(after.liveTensors).toBe(before.liveTensors);
      expect(after.liveBytes).toBe(before.liveBytes);
      return after.peakBytes - before.liveBytes;
    };
    const two = await prefillPeak(2);
    expect(await prefillPeak(6)).toBeLessThan(1.2 * two);
  });

  it('refuses weights that do not fit the config, a bad maxSequence and a step outside the cache', async () => {
    const config = tinyLlamaConfig();
    const dir = await writeTinyLlama(config, tinyLlamaWeights(config, 1));
    using model = await LlamaModel.load(backend, dir);
    const other = parseLlamaConfig(tinyLlamaConfig({ intermediate_size: 90 }));
    expect(() => new LlamaModel(backend, other, model.weights)).toThrow(
      /'model.layers.0.mlp.gate_proj.weight'.*expected f32\[90, 64\], got f32\[91, 64\]/,
    );
    const tied = parseLlamaConfig(tinyLlamaConfig({ tie_word_embeddings: true }));
    expect(() => new LlamaModel(backend, tied, model.weights)).toThrow(/a tied head must be the embedding/);
    expect(() => new LlamaModel(backend, model.config, model.weights, { maxSequence: 0 })).toThrow(
      /maxSequence/,
    );
    const live = backend.memory().liveTensors;
    await expect(LlamaModel.load(backend, dir, { maxSequence: 2.5 })).rejects.toThrow(/maxSequence/);
    expect(backend.memory().liveTensors).toBe(live);
    expect(() => model.step(backend, 32, [])).toThrow(/an integer in \[0, 32\)/);
    // writeToken checks the id only: a recorded step's position is the caller's.
    model.prefill(Array.from({ length: 32 }, (_, i) => i % 97)).dispose();
    model.writeToken(96);
    expect(() => model.writeToken(97)).toThrow(/97 at index 0/);
    model.dispose();
    expect(() => model.prefill([1])).toThrow(/model was disposed/);
  });
});
