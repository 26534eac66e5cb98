import {
  createCpuBackend,
  InvalidArgumentError,
  QUANT_FORMATS,
  quantizedGateUpSwiglu,
  quantizedMatmul,
  quantizeWeights,
  quantLayout,
  rmsNorm,
  ShapeError,
  swiglu,
  type Tensor,
  uploadQuantized,
} from '@rayo/core';
import { removeTinyLlamas, tinyLlamaConfig, tinyLlamaWeights, writeTinyLlama } from '@rayo/train-testkit';
import { afterAll, describe, expect, it, vi } from 'vitest';
import { LlamaModel } from './model.js';
import { DEQUANTIZED_PREFILL_ROWS } from './projections.js';

const backend = createCpuBackend();
afterAll(removeTinyLlamas);
// K of 64 and 91 (the FFN): q4g128 groups past the row, partial blocks of 32.
const config = tinyLlamaConfig();
const prompt = [3, 14, 15, 92, 65, 35];

function argmax(row: Float32Array): number {
  let best = 0;
  for (let i = 1; i < row.length; i++) if (row[i]! > row[best]!) best = i;
  return best;
}

/** max |got − want|, and want's largest magnitude (the scale the error is judged against). */
function errorAgainst(got: Float32Array, want: Float32Array): { maxError: number; spread: number } {
  let maxError = 0;
  let spread = 0;
  for (let i = 0; i < want.length; i++) {
    maxError = Math.max(maxError, Math.abs(got[i]! - want[i]!));
    spread = Math.max(spread, Math.abs(want[i]!));
  }
  return { maxError, spread };
}

/** `errorAgainst` of a prefill of the prompt by `model` and by `dense`. */
async function prefillError(
  model: LlamaModel,
  dense: LlamaModel,
): Promise<{ maxError: number; spread: number }> {
  using want = dense.prefill(prompt);
  using got = model.prefill(prompt);
  return errorAgainst((await got.read()) as Float32Array, (await want.read()) as Float32Array);
}

describe('LlamaModel with quantized projections', async () => {
  const dir = await writeTinyLlama(config, tinyLlamaWeights(config, 3));

  it('quantizes each layer as it is uploaded: the load peaks below a dense load', async () => {
    const fresh = createCpuBackend();
    try {
      fresh.resetPeakMemory();
      const dense = await LlamaModel.load(fresh, dir);
      const densePeak = fresh.memory().peakBytes;
      dense.dispose();
      fresh.resetPeakMemory();
      using quantized = await LlamaModel.load(fresh, dir, { weightFormat: 'q8', quantizeOn: 'device' });
      // Uploading every layer dense before quantizing would peak above the dense model itself.
      expect(fresh.memory().peakBytes).toBeLessThan(densePeak);
      expect(quantized.quantization!.path).toBe('device');
    } finally {
      fresh.dispose();
    }
  });

  it('8-bit and 4-bit formats follow the dense model: close logits, and 8 bits the same greedy token', async () => {
    using dense = await LlamaModel.load(backend, dir);
    using want = dense.prefill(prompt);
    const wanted = (await want.read()) as Float32Array;
    const vocab = config.vocab_size as number;
    // The formats of any K (q4k, q5k and q6k take whole super-blocks: below).
    for (const format of QUANT_FORMATS.filter((f) => !quantLayout(f, 1).subBlockScales)) {
      const eightBits = quantLayout(format, 1).bits === 8;
      using model = await LlamaModel.load(backend, dir, { weightFormat: format });
      expect(model.quantization?.format).toBe(format);
      expect(model.quantization!.quantizedBytes).toBeLessThan(model.quantization!.denseBytes / 3);
      expect(model.quantization!.path).toBe('host');
      expect(model.quantization!.rmsRelativeError!).toBeLessThan(eightBits ? 0.01 : 0.15);
      using got = model.prefill(prompt);
      const values = (await got.read()) as Float32Array;
      const { maxError, spread } = errorAgainst(values, wanted);
      expect(maxError).toBeLessThan(spread * (eightBits ? 0.02 : 0.25));
      // 8 bits keep the greedy token of this tiny model; 4 bits may flip its close calls.
      const last = (a: Float32Array) => a.subarray(a.length - vocab);
      if (eightBits) expect(argmax(last(values)), format).toBe(argmax(last(wanted)));
    }
  });

  // Bits per weight, the largest rms error of the weights and the largest prefill error against the spread.
  for (const [format, bits, rms, prefill] of [
    ['q4k', 4.5, 0.15, 0.25],
    ['q5k', 5.5, 0.08, 0.15],
    ['q6k', 6.5625, 0.05, 0.1],
  ] as const) {
    it(`${format} (rows of whole super-blocks) quantizes on the host or the device and follows the dense model`, async () => {
      const wide = tinyLlamaConfig({ hidden_size: 256, intermediate_size: 512, num_attention_heads: 4 });
      const wideDir = await writeTinyLlama(wide, tinyLlamaWeights(wide, 5));
      using dense = await LlamaModel.load(backend, wideDir);
      using model = await LlamaModel.load(backend, wideDir, { weightFormat: format });
      expect(model.quantization).toMatchObject({ format, path: 'host' });
      // Its bits per weight of the f32 weights' 32.
      expect(model.quantization!.quantizedBytes).toBe((model.quantization!.denseBytes * bits) / 32);
      expect(model.quantization!.rmsRelativeError!).toBeLessThan(rms);
      const { maxError, spread } = await prefillError(model, dense);
      expect(maxError).toBeLessThan(spread * prefill);
      // quantizeRows' outputs (sub-block scales, then q4k's offsets) become the same weight.
      using onDevice = await LlamaModel.load(backend, wideDir, {
        weightFormat: format,
        quantizeOn: 'device',
      });
      expect(onDevice.quantization).toMatchObject({ format, path: 'device' });
      expect(onDevice.quantization!.quantizedBytes).toBe(model.quantization!.quantizedBytes);
      model.reset();
      using want = model.prefill(prompt);
      using got = onDevice.prefill(prompt);
      expect(await got.read()).toEqual(await want.read());
      // K of 64: not whole super-blocks, on either path.
      await expect(LlamaModel.load(backend, dir, { weightFormat: format })).rejects.toThrow(ShapeError);
      await expect(
        LlamaModel.load(backend, dir, { weightFormat: format, quantizeOn: 'device' }),
      ).rejects.toThrow(ShapeError);
    });
  }

  it(`multiplies a prompt of ${DEQUANTIZED_PREFILL_ROWS}+ rows by dequantized weights, as the quantized kernels do row by row`, async () => {
    // Rows past the threshold take the dequantize-then-'half' path; row by
    // row (decode) the quantized kernels: the same weights, activations
    // rounded to bf16 on the first path only.
    const vocab = config.vocab_size as number;
    const long = Array.from({ length: DEQUANTIZED_PREFILL_ROWS + 5 }, (_, i) => (i * 37 + 11) % vocab);
    const longConfig = { ...config, max_position_embeddings: long.length };
    const longDir = await writeTinyLlama(longConfig, tinyLlamaWeights(longConfig, 3));
    for (const format of ['q8', 'q4g32'] as const) {
      using model = await LlamaModel.load(backend, longDir, { weightFormat: format });
      using all = model.prefill(long);
      const logits = (await all.read()) as Float32Array;
      model.reset();
      let spread = 0;
      let maxError = 0;
      for (const [i, token] of long.entries()) {
        using step = model.decode(token);
        const row = errorAgainst(
          logits.subarray(i * vocab, (i + 1) * vocab),
          (await step.read()) as Float32Array,
        );
        spread = Math.max(spread, row.spread);
        maxError = Math.max(maxError, row.maxError);
      }
      expect(maxError, format).toBeGreaterThan(0);
      expect(maxError, format).toBeLessThan(spread * 0.03);
      // Recorded into a batch (a profiler's), the dequantized weights live as long as the batch.
      model.reset();
      using ids = backend.upload(Int32Array.from(long), [long.length], 'i32');
      const made: Tensor[] = [];
      const batch = backend.batch();
      const recorded = model.recordChunk(batch, ids, 0, made);
      batch.submit();
      expect(Array.from((await recorded.read()) as Float32Array)).toEqual(Array.from(logits));
      for (const t of made) t.dispose();
    }
  });

  it('quantizes the head too on request: its bytes in the report, logits near the dense model', async () => {
    using dense = await LlamaModel.load(backend, dir);
    using projections = await LlamaModel.load(backend, dir, { weightFormat: 'q8' });
    using model = await LlamaModel.load(backend, dir, { weightFormat: 'q8', quantizeHead: true });
    expect(model.weights.head).toBeUndefined();
    const headBytes = (config.vocab_size as number) * (config.hidden_size as number) * 4;
    expect(model.quantization!.denseBytes - projections.quantization!.denseBytes).toBe(headBytes);
    expect(model.quantization!.quantizedBytes).toBeGreaterThan(projections.quantization!.quantizedBytes);
    const { maxError, spread } = await prefillError(model, dense);
    expect(maxError).toBeGreaterThan(0);
    expect(maxError).toBeLessThan(spread * 0.02);
    await expect(LlamaModel.load(backend, dir, { quantizeHead: true })).rejects.toThrow(
      /quantizeHead needs a weightFormat/,
    );
  });

  it('decodes the same tokens replayed, eagerly and by prefill of the whole sequence', async () => {
    using model = await LlamaModel.load(backend, dir, { weightFormat: 'q4g32' });
    const tokens: number[] = [];
    for await (const t of model.generate(prompt, { maxNewTokens: 5, temperature: 0 })) tokens.push(t);
    using eager = await LlamaModel.load(backend, dir, { weightFormat: 'q4g32', replay: false });
    const again: number[] = [];
    for await (const t of eager.generate(prompt, { maxNewTokens: 5, temperature: 0 })) again.push(t);
    expect(again).toEqual(tokens);
    // Prefill of prompt + tokens picks each next token as decoding did.
    model.reset();
    using all = model.prefill([...prompt, ...tokens.slice(0, -1)]);
    const logits = (await all.read()) as Float32Array;
    const vocab = config.vocab_size as number;
    const picked = tokens.map((_, i) =>
      argmax(logits.subarray((prompt.length - 1 + i) * vocab, (prompt.length + i) * vocab)),
    );
    expect(picked).toEqual(tokens);
  });

  it('takes a quantized embedding and head in place of the dense ones, and refuses ones of another shape', async () => {
    using dense = await LlamaModel.load(backend, dir);
    const vocab = config.vocab_size as number;
    const hidden = config.hidden_size as number;
    const quantizedOf = async (t: Tensor) =>
      uploadQuantized(backend, quantizeWeights(await t.read(), [vocab, hidden], 'q8g32'));
    const embedding = await quantizedOf(dense.weights.embedding!);
    const head = await quantizedOf(dense.weights.head!);
    // The model shares dense's layers and norm, so it is not disposed: dense frees those, the test the rest.
    const weights = { ...dense.weights, embedding: undefined, head: undefined };
    const model = new LlamaModel(backend, dense.config, weights, { quantized: { embedding, head } });
    const { maxError, spread } = await prefillError(model, dense);
    expect(maxError).toBeGreaterThan(0);
    expect(maxError).toBeLessThan(spread * 0.02);
    const short = uploadQuantized(
      backend,
      quantizeWeights(new Float32Array(3 * hidden).fill(1), [3, hidden], 'q8g32'),
    );
    expect(
      () => new LlamaModel(backend, dense.config, weights, { quantized: { embedding: short, head } }),
    ).toThrow(ShapeError);
    expect(() => new LlamaModel(backend, dense.config, weights, { quantized: { embedding } })).toThrow(
      /weight 'lm_head\.weight' does not fit the config/,
    );
    short.dispose();
    embedding.dispose();
    head.dispose();
  });

  it('leaves a projection its quantized layer omits to the dense weights, and refuses one absent from both', async () => {
    using dense = await LlamaModel.load(backend, dir);
    // Every layer's o and down quantized, the rest dense (q, k and v fused): the logits of o and down dequantized.
    const quantizedOf = async (t: Tensor) =>
      uploadQuantized(backend, quantizeWeights(await t.read(), t.shape as [number, number], 'q8g32a'));
    const layers = await Promise.all(
      dense.weights.layers.map(async (l) => ({
        o: await quantizedOf(l.o!),
        down: await quantizedOf(l.down!),
      })),
    );
    const weights = {
      ...dense.weights,
      layers: dense.weights.layers.map((l) => ({ ...l, o: undefined, down: undefined })),
    };
    const model = new LlamaModel(backend, dense.config, weights, { quantized: { layers } });
    const { maxError, spread } = await prefillError(model, dense);
    expect(maxError).toBeGreaterThan(0);
    expect(maxError).toBeLessThan(spread * 0.02);
    const missing = { ...weights, layers: weights.layers.map((l) => ({ ...l, up: undefined })) };
    expect(() => new LlamaModel(backend, dense.config, missing, { quantized: { layers } })).toThrow(
      /layer 0 has no 'up' projection, quantized or dense/,
    );
    // A quantized q beside the fused dense q, k, v would be ignored: refused.
    const withQ = layers.map((l) => ({ ...l, q: l.o }));
    expect(() => new LlamaModel(backend, dense.config, weights, { quantized: { layers: withQ } })).toThrow(
      /layer 0 has q, k and v fused and 'q' apart/,
    );
    for (const l of layers) {
      l.o.dispose();
      l.down.dispose();
    }
  });

  it('decodes gate, up and SwiGLU in one quantizedGateUpSwiglu per layer, as the separate products do', async () => {
    const layers = config.num_hidden_layers as number;
    // q4k takes rows of whole super-blocks: a model of hidden size 256.
    const wide = tinyLlamaConfig({ hidden_size: 256, intermediate_size: 512, num_attention_heads: 4 });
    const wideDir = await writeTinyLlama(wide, tinyLlamaWeights(wide, 7));
    for (const [format, from] of [
      ['q8', dir],
      ['q4g128', dir],
      ['q8g32', dir],
      ['q4g32a', dir],
      ['q4k', wideDir],
    ] as const) {
      using model = await LlamaModel.load(backend, from, { weightFormat: format, replay: false });
      model.prefill(prompt).dispose();
      const run = vi.spyOn(backend, 'run');
      try {
        using step = model.decode(prompt[0]!);
        const names = run.mock.calls.map((call) => call[0].name);
        expect(
          names.filter((name) => name === quantizedGateUpSwiglu.name),
          format,
        ).toHaveLength(layers);
        expect(names).not.toContain(swiglu.name);
        // q, k and v fused in one product; o and down stay separate.
        expect(names.filter((name) => name === quantizedMatmul.name)).toHaveLength(3 * layers);
        // The norms before q·k·v and before gate·up folded into those products (normWeight, last):
        // no rmsNorm launch but the head's.
        const normed = run.mock.calls.filter(([spec, inputs]) =>
          spec.name === quantizedGateUpSwiglu.name
            ? inputs[9] !== undefined
            : spec.name === quantizedMatmul.name && inputs[6] !== undefined,
        );
        expect(normed).toHaveLength(2 * layers);
        expect(names.filter((name) => name === rmsNorm.name).length).toBeLessThanOrEqual(1);
        // The same step through the separate products: the prefill of one more token takes them.
        model.reset();
        using all = model.prefill([...prompt, prompt[0]!]);
        const vocab = config.vocab_size as number;
        const want = ((await all.read()) as Float32Array).subarray(prompt.length * vocab);
        const got = (await step.read()) as Float32Array;
        let maxError = 0;
        for (let i = 0; i < vocab; i++) maxError = Math.max(maxError, Math.abs(got[i]! - want[i]!));
        expect(maxError).toBeLessThan(1e-3);
      } finally {
        run.mockRestore();
      }
    }
  });

  it("lets every quantized product take int8 activations by default, and none with quantizedActivations 'exact'", async () => {
    for (const [option, want] of [
      [undefined, 'int8'],
      ['exact', 'exact'],
    ] as const) {
      using model = await LlamaModel.load(backend, dir, {
        weightFormat: 'q8',
        quantizeHead: true,
        replay: false,
        ...(option ? { quantizedActivations: option } : {}),
      });
      expect(model.quantizedActivations).toBe(want);
      const run = vi.spyOn(backend, 'run');
      try {
        model.prefill(prompt.slice(0, 2)).dispose();
        model.decode(prompt[2]!).dispose();
        const quantized = run.mock.calls.filter(([spec]) =>
          [quantizedMatmul.name, quantizedGateUpSwiglu.name].includes(spec.name),
        );
        // Per layer q·k·v, o, gate·up and down, in the prefill and the step, and the head in each.
        expect(quantized.length).toBeGreaterThanOrEqual(
          2 * (4 * (config.num_hidden_layers as number) + 1) - 2,
        );
        for (const [, , attrs] of quantized) expect(attrs).toMatchObject({ activations: want });
      } finally {
        run.mockRestore();
      }
    }
    await expect(
      LlamaModel.load(backend, dir, { weightFormat: 'q8', quantizedActivations: 'int4' as 'int8' }),
    ).rejects.toThrow(/quantizedActivations.*'exact' \| 'int8'.*int4/);
  });

  it('refuses a format that is none', async () => {
    await expect(LlamaModel.load(backend, dir, { weightFormat: 'q3' as 'q8' })).rejects.toThrow(
      InvalidArgumentError,
    );
    expect(backend.supports(quantizedMatmul.name)).toBe(true);
  });
});
