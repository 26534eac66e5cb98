import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createCpuBackend, ShapeError } from '@rayo/core';
import {
  expectReferenceGreedy,
  FAMILY_CONFIGS,
  llama32Config,
  ModelScope,
  maxAbsDiff,
  maxRowDiff,
  modelTestBackends,
  qwen3Config,
  qwen25Config,
  referenceLogits,
  removeTinyLlamas,
  smolLM2Config,
  type TinyWeights,
  tinyLlamaWeights,
  writeTinyLlama,
} from '@rayo/train-testkit';
import { afterAll, describe, expect, it } from 'vitest';
import { openNodeFile } from '../checkpoint/randomAccessFile.js';
import { parseLlamaConfig } from '../models/llama/config.js';
import { LlamaModel } from '../models/llama/model.js';
import { llamaToGguf, ropeFactorsOf } from './convertLlama.js';
import { dequantize } from './dequantize.js';
import type { GgmlType } from './ggmlTypes.js';
import { GgufFile } from './ggufFile.js';
import { ggufLlamaConfig } from './llamaConfig.js';
import { loadGgufLlama } from './loadLlama.js';
import { quantize } from './quantize.js';
import { repackOntoCoreFormats } from './repack.js';
import { writeGgufFile } from './writer.js';

/** As the safetensors family tests: f32 rounding against the f64 reference (GGUF's f32 epsilon adds ~1e-8). */
const TOLERANCE = 5e-5;
const PROMPT = [5, 17, 3, 96, 0, 42, 8, 71, 30];
const CONTINUATION = [61, 2, 77];
/** Lavapipe compiles each pipeline on first use, slowly on a loaded machine. */
const TIMEOUT = 300_000;

const dir = await mkdtemp(join(tmpdir(), 'gguf-families-'));
let files = 0;
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
  await removeTinyLlamas();
});

/** Writes `weights` (Hugging Face layout) as a GGUF file through the converter. */
async function writeGguf(
  json: Record<string, unknown>,
  weights: TinyWeights,
  typeOf?: (hfName: string) => GgmlType,
): Promise<string> {
  const path = join(dir, `model-${files++}.gguf`);
  await writeGgufFile(path, llamaToGguf(parseLlamaConfig(json), weights, { typeOf }));
  return path;
}

describe('GGUF files of every family', () => {
  it('write each family under its architecture: Q and K permuted for llama only, llama3 factors as rope_freqs', async () => {
    const cases = [
      [llama32Config(), 'llama', true],
      [smolLM2Config(), 'llama', false],
      [qwen25Config(), 'qwen2', false],
      [qwen3Config(), 'qwen3', false],
    ] as const;
    for (const [json, arch, factors] of cases) {
      const weights = tinyLlamaWeights(json, 3);
      const raw = await openNodeFile(await writeGguf(json, weights));
      try {
        const file = await GgufFile.open(raw);
        expect(file.metadata.get('general.architecture')?.value).toBe(arch);
        const q = new Float32Array((await file.readBytes('blk.0.attn_q.weight')).slice().buffer);
        const hfQ = weights.get('model.layers.0.self_attn.q_proj.weight')!.data;
        // llama.cpp's converter permutes only the llama architecture's rows.
        expect(Array.from(q).every((v, i) => v === hfQ[i])).toBe(arch !== 'llama');
        expect(file.tensors.has('rope_freqs.weight')).toBe(factors);
        if (arch === 'qwen2') {
          const bias = new Float32Array((await file.readBytes('blk.1.attn_k.bias')).slice().buffer);
          expect(Array.from(bias)).toEqual(
            Array.from(weights.get('model.layers.1.self_attn.k_proj.bias')!.data),
          );
        }
        if (arch === 'qwen3') expect(file.tensors.get('blk.0.attn_q_norm.weight')?.shape).toEqual([24]);
        expect(ggufLlamaConfig(file.metadata, file.tensors).family).toBe(arch === 'llama' ? 'llama' : arch);
      } finally {
        await raw.close();
      }
    }
  });

  it("llama3 factors follow llama.cpp's converter: 1, factor, and 1 / ((1 − s) / factor + s) between", () => {
    const factors = ropeFactorsOf(parseLlamaConfig(llama32Config()))!;
    // Head 16, theta 500000, original context 64: pair 0 short, pair 1 between, the rest long.
    expect(factors[0]).toBe(1);
    expect(factors[1]).toBeGreaterThan(1);
    expect(factors[1]).toBeLessThan(32);
    expect(Array.from(factors.subarray(2))).toEqual(new Array(6).fill(32));
  });
});

const backends = await modelTestBackends();

describe.each(backends)('GGUF families on %s', (_name, create) => {
  const scope = new ModelScope(create);
  afterAll(scope.dispose);

  FAMILY_CONFIGS.forEach(([label, makeConfig], index) => {
    it(
      `${label}: the logits and greedy tokens of the f64 reference, the weights of the safetensors load`,
      async () => {
        const backend = await scope.backend();
        const json = makeConfig();
        const weights = tinyLlamaWeights(json, 500 + index);
        const model = await loadGgufLlama(backend, await writeGguf(json, weights), { maxSequence: 32 });
        const fromSafetensors = await LlamaModel.load(backend, await writeTinyLlama(json, weights), {
          maxSequence: 32,
        });
        scope.keep(model, fromSafetensors);
        // Q and K (and their biases) back in Hugging Face order, whatever the architecture did to them.
        for (const key of ['q', 'k', 'qBias', 'kBias', 'qkv', 'qkvBias', 'oBias', 'qNorm'] as const) {
          const got = model.weights.layers[1]![key];
          const want = fromSafetensors.weights.layers[1]![key];
          expect(got === undefined).toBe(want === undefined);
          if (got && want) expect(Array.from(await got.read())).toEqual(Array.from(await want.read()));
        }
        const vocab = json.vocab_size as number;
        const want = referenceLogits(json, weights, [...PROMPT, ...CONTINUATION]);
        using prefill = model.prefill(PROMPT);
        const got = await prefill.read();
        expect(maxRowDiff(got, want.slice(0, PROMPT.length), vocab)).toBeLessThan(TOLERANCE);
        for (const [i, token] of CONTINUATION.entries()) {
          using logits = model.decode(token);
          expect(maxAbsDiff(await logits.read(), want[PROMPT.length + i]!)).toBeLessThan(TOLERANCE);
        }
        await expectReferenceGreedy(model, json, weights, PROMPT, 5, TOLERANCE);
      },
      TIMEOUT,
    );
  });

  it(
    'a Qwen2 file with Q8_0 projections: quantized products, dense biases, the logits of the dequantized weights',
    async () => {
      const backend = await scope.backend();
      // Rows of Q8_0 blocks: an FFN of 96.
      const json = qwen25Config({ intermediate_size: 96 });
      const w = tinyLlamaWeights(json, 41);
      const projection = /_proj\.weight$/;
      const typeOf = (name: string): GgmlType => (projection.test(name) ? 'Q8_0' : 'F32');
      const model = await loadGgufLlama(backend, await writeGguf(json, w, typeOf), {
        repack: repackOntoCoreFormats,
        maxSequence: 32,
      });
      scope.keep(model);
      expect(model.weights.layers[0]!.q).toBeUndefined();
      // The quantized q, k and v are fused on load, and their dense biases with them.
      expect(model.weights.layers[0]!.qBias).toBeUndefined();
      expect(model.weights.layers[0]!.qkvBias?.dtype).toBe('f32');
      const decoded: TinyWeights = new Map(
        [...w].map(([name, { shape, data }]) => [
          name,
          { shape, data: projection.test(name) ? dequantize('Q8_0', quantize('Q8_0', data)) : data },
        ]),
      );
      const want = referenceLogits(json, decoded, PROMPT);
      using logits = model.prefill(PROMPT);
      const got = await logits.read();
      // The quantized kernels round activations differently from f32 products: looser than f32, far below a lost bias.
      expect(maxAbsDiff(got.subarray((PROMPT.length - 1) * 97), want.at(-1)!)).toBeLessThan(1e-3);
    },
    TIMEOUT,
  );
});

describe('GGUF refusals of the families', () => {
  const backend = createCpuBackend();
  afterAll(() => backend.dispose());

  it('a rope_freqs table of the wrong length, and factors below 1, named', async () => {
    const json = llama32Config();
    const weights = tinyLlamaWeights(json, 2);
    const contents = llamaToGguf(parseLlamaConfig(json), weights);
    const withFactors = async (values: Float32Array) => {
      const path = join(dir, `factors-${files++}.gguf`);
      const tensors = contents.tensors.map((t) =>
        t.name === 'rope_freqs.weight' ? { ...t, shape: [values.length], values } : t,
      );
      await writeGgufFile(path, { ...contents, tensors });
      return loadGgufLlama(backend, path).catch((e: unknown) => e);
    };
    const short = await withFactors(new Float32Array(4).fill(1));
    expect(short).toBeInstanceOf(ShapeError);
    expect(String(short)).toMatch(/'rope_freqs\.weight'.*F32 \[8\] \(headDim \/ 2\).*F32 \[4\]/);
    expect(String(await withFactors(Float32Array.of(1, 1, 0.5, 1, 1, 1, 1, 1)))).toMatch(
      /'rope_freqs\.weight'.*factors are invalid.*scaling\.factors\[2\]: 0\.5/,
    );
  });

  it('biases a family lacks, and missing ones, named', async () => {
    const json = qwen25Config();
    const weights = tinyLlamaWeights(json, 2);
    weights.delete('model.layers.1.self_attn.v_proj.bias');
    const error = await loadGgufLlama(backend, await writeGguf(json, weights)).catch((e: unknown) => e);
    expect(String(error)).toMatch(/'blk\.1\.attn_v\.bias' is missing/);
  });
});
