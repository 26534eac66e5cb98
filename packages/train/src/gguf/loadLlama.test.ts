import { mkdtemp, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createCpuBackend, DTypeError, InvalidArgumentError, type Shape, ShapeError } from '@rayo/core';
import {
  removeTinyLlamas,
  type TinyWeights,
  tinyLlamaConfig,
  tinyLlamaWeights,
  writeTinyLlama,
} from '@rayo/train-testkit';
import { afterAll, describe, expect, it } from 'vitest';
import { roundF32To } from '../checkpoint/floatWords.js';
import { type OpenFile, openNodeFile } from '../checkpoint/randomAccessFile.js';
import { parseLlamaConfig } from '../models/llama/config.js';
import { LlamaModel } from '../models/llama/model.js';
import { llamaToGguf } from './convertLlama.js';
import { dequantize } from './dequantize.js';
import type { GgmlQuantizedType, GgmlType } from './ggmlTypes.js';
import { loadGgufLlama, openGgufLlama, uploadGgufLlamaWeights } from './loadLlama.js';
import { quantize } from './quantize.js';
import { type GgufQuantizedTensor, type GgufRepack, repackOntoCoreFormats } from './repack.js';
import { writeGgufFile } from './writer.js';

const backend = createCpuBackend();
const dir = await mkdtemp(join(tmpdir(), 'gguf-llama-'));
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
  await removeTinyLlamas();
  backend.dispose();
});

// An f32-exact epsilon: GGUF stores it as float32, config.json as a double.
const PROMPT = [5, 17, 3, 96, 0, 42, 8];
let files = 0;

/** Writes `weights` (Hugging Face layout) as a GGUF file, through the converter. */
async function writeGguf(
  json: Record<string, unknown>,
  weights: TinyWeights,
  typeOf?: (hfName: string, shape: Shape) => GgmlType,
): Promise<string> {
  const path = join(dir, `model-${files++}.gguf`);
  await writeGgufFile(path, llamaToGguf(parseLlamaConfig(json), weights, { typeOf }));
  return path;
}

async function prefillLogits(model: LlamaModel): Promise<number[]> {
  using logits = model.prefill(PROMPT);
  return Array.from(await logits.read());
}

describe('loading a GGUF Llama', () => {
  for (const tied of [false, true]) {
    it(`F32: the same weights in Hugging Face layout and the same logits as from safetensors (${tied ? 'tied' : 'untied'} head)`, async () => {
      const json = tinyLlamaConfig({ rms_norm_eps: 2 ** -17, tie_word_embeddings: tied });
      const weights = tinyLlamaWeights(json, 7);
      using fromGguf = await loadGgufLlama(backend, await writeGguf(json, weights));
      using fromSafetensors = await LlamaModel.load(backend, await writeTinyLlama(json, weights));
      expect(fromGguf.config).toEqual(fromSafetensors.config);
      expect(fromGguf.config.tieWordEmbeddings).toBe(tied);
      expect(fromGguf.weights.head === fromGguf.weights.embedding).toBe(tied);
      // Q and K came back from llama.cpp's row order (fused with V on load, their rows first).
      const rows = (...names: string[]) =>
        names.flatMap((n) => Array.from(weights.get(`model.layers.1.${n}`)!.data));
      const layer = fromGguf.weights.layers[1]!;
      expect(Array.from(await layer.qkv!.read())).toEqual(
        rows('self_attn.q_proj.weight', 'self_attn.k_proj.weight', 'self_attn.v_proj.weight'),
      );
      expect(Array.from(await layer.down!.read())).toEqual(rows('mlp.down_proj.weight'));
      expect(await prefillLogits(fromGguf)).toEqual(await prefillLogits(fromSafetensors));
    });
  }

  it('F16: matrices stay f16 (rounded once, as the converter writes them), norms f32', async () => {
    const json = tinyLlamaConfig({ rms_norm_eps: 2 ** -17 });
    const weights = tinyLlamaWeights(json, 8);
    const path = await writeGguf(json, weights, (name) => (name.endsWith('norm.weight') ? 'F32' : 'F16'));
    using model = await loadGgufLlama(backend, path);
    expect(model.weightDtype).toBe('f16');
    const q = weights.get('model.layers.0.self_attn.q_proj.weight')!.data;
    // q's rows lead the fused q, k, v weight.
    const qkv = Array.from(await model.weights.layers[0]!.qkv!.read());
    expect(qkv.slice(0, q.length)).toEqual(Array.from(roundF32To('f16', q)));
    expect(model.weights.norm.dtype).toBe('f32');
    using widened = await loadGgufLlama(backend, path, { weightDtype: 'f32' });
    expect(widened.weightDtype).toBe('f32');
  });

  it('streams tensor by tensor: the header in chunks, tensors in reads of at most maxReadBytes', async () => {
    const json = tinyLlamaConfig({ rms_norm_eps: 2 ** -17 });
    const path = await writeGguf(json, tinyLlamaWeights(json, 9));
    const reads: { position: number; length: number }[] = [];
    const openFile: OpenFile = async (p) => {
      const file = await openNodeFile(p);
      return {
        ...file,
        read: (into, position) => {
          reads.push({ position, length: into.length });
          return file.read(into, position);
        },
      };
    };
    const options = { openFile, maxReadBytes: 4096, headerChunkBytes: 512 };
    using _model = await loadGgufLlama(backend, path, options);
    const { size } = await stat(path);
    expect(reads.every((r) => r.length <= 4096)).toBe(true);
    // Nothing is read twice but the header's last chunk, which may run into the data.
    expect(reads.reduce((n, r) => n + r.length, 0)).toBeLessThanOrEqual(size + 512);
    const seen = new Uint8Array(size);
    for (const r of reads) seen.fill(1, r.position, r.position + r.length);
    const gguf = await openGgufLlama(path);
    await gguf.close();
    for (const t of gguf.file.tensors.values()) {
      const start = gguf.file.dataStart + t.offset;
      expect(seen.subarray(start, start + t.byteLength).every((b) => b === 1)).toBe(true);
    }
  });

  describe('quantized tensors', () => {
    // A Q4_K_M-like mix: Q6_K for the embedding, V and down; Q4_K for the other matrices; F32 norms.
    // Q4_K and Q6_K need rows of 256: a model of d 256, FFN 256, head 64.
    const json = tinyLlamaConfig({
      hidden_size: 256,
      intermediate_size: 256,
      num_hidden_layers: 1,
      rms_norm_eps: 2 ** -17,
    });
    const weights = tinyLlamaWeights(json, 10);
    const q4km = (name: string): GgmlType =>
      name.endsWith('norm.weight')
        ? 'F32'
        : /embed_tokens|v_proj|down_proj|lm_head/.test(name)
          ? 'Q6_K'
          : 'Q4_K';
    const path = writeGguf(json, weights, q4km);

    it('by default are refused, naming the tensor and its type, before the model is made', async () => {
      const error = await loadGgufLlama(backend, await path).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(DTypeError);
      expect(String(error)).toMatch(
        /quantized GGUF tensors need the quantized kernels: 'token_embd\.weight' is Q6_K/,
      );
    });

    it('reach the repack as stored blocks in the decoder row order, never as f32', async () => {
      const seen: GgufQuantizedTensor[] = [];
      const repack: GgufRepack = (b, tensor) => {
        seen.push(tensor);
        return {
          format: `test-${tensor.type}`,
          shape: tensor.shape,
          tensors: { blocks: b.upload(Uint32Array.of(tensor.bytes.length), [1], 'u32') },
        };
      };
      const gguf = await openGgufLlama(await path);
      try {
        const loaded = await uploadGgufLlamaWeights(backend, gguf, { repack });
        expect(loaded.layers[0]!.q).toMatchObject({ format: 'test-Q4_K', shape: [256, 256] });
        expect(loaded.norm.dtype).toBe('f32');
        expect(seen.map((t) => t.name)).toEqual(
          [...gguf.file.tensors.keys()].filter((n) => !n.includes('norm')),
        );
        for (const t of seen) {
          const hf = weights.get(t.weight)!;
          expect(t.type).toBe(q4km(t.weight));
          expect(t.shape).toEqual(hf.shape);
          expect(t.dims).toEqual([...hf.shape].reverse());
          // Rows are quantized independently, so blocks in Hugging Face row order are the quantized HF rows.
          expect(t.bytes).toEqual(quantize(t.type as GgmlQuantizedType, hf.data));
        }
        for (const w of [loaded.embedding, ...Object.values(loaded.layers[0]!), loaded.norm, loaded.head]) {
          if ('tensors' in w) for (const t of Object.values(w.tensors)) t.dispose();
          else w.dispose();
        }
      } finally {
        await gguf.close();
      }
      const error = await loadGgufLlama(backend, await path, { repack }).catch((e: unknown) => e);
      expect(String(error)).toMatch(
        /a repacked weight must be in one of core’s quantized formats.*'test-Q6_K'/,
      );
    });

    it('a repack that yields float tensors makes a model whose logits match the same values from safetensors', async () => {
      // Q8_0 and Q4_0 need rows of 32: FFN 96.
      const small = tinyLlamaConfig({ intermediate_size: 96, rms_norm_eps: 2 ** -17 });
      const w = tinyLlamaWeights(small, 11);
      const typeOf = (name: string): GgmlType =>
        name.endsWith('norm.weight') ? 'F32' : /gate|k_proj|lm_head/.test(name) ? 'Q4_0' : 'Q8_0';
      // A stand-in for a device dequantization kernel (a test oracle; the loader never does this on the host).
      const standIn: GgufRepack = (b, t) =>
        b.upload(dequantize(t.type as GgmlQuantizedType, t.bytes), t.shape, 'f32');
      using fromGguf = await loadGgufLlama(backend, await writeGguf(small, w, typeOf), { repack: standIn });
      const decoded: TinyWeights = new Map(
        [...w].map(([name, { shape, data }]) => {
          const type = typeOf(name);
          return [
            name,
            {
              shape,
              data:
                type === 'F32'
                  ? data
                  : dequantize(type as GgmlQuantizedType, quantize(type as GgmlQuantizedType, data)),
            },
          ];
        }),
      );
      using fromSafetensors = await LlamaModel.load(backend, await writeTinyLlama(small, decoded));
      expect(await prefillLogits(fromGguf)).toEqual(await prefillLogits(fromSafetensors));
    });
  });

  it('Q4_0 projections run on core’s q4g32 kernels: the tokens and logits of the same weights dequantized, in f32', async () => {
    const small = tinyLlamaConfig({ intermediate_size: 96, rms_norm_eps: 2 ** -17 });
    const w = tinyLlamaWeights(small, 13);
    const projection = /_proj\.weight$/;
    const typeOf = (name: string): GgmlType => (projection.test(name) ? 'Q4_0' : 'F32');
    using fromGguf = await loadGgufLlama(backend, await writeGguf(small, w, typeOf), {
      repack: repackOntoCoreFormats,
    });
    expect(fromGguf.weights.layers[0]!.q).toBeUndefined();
    const decoded: TinyWeights = new Map(
      [...w].map(([name, { shape, data }]) => [
        name,
        { shape, data: projection.test(name) ? dequantize('Q4_0', quantize('Q4_0', data)) : data },
      ]),
    );
    using dense = await LlamaModel.load(backend, await writeTinyLlama(small, decoded));
    const [got, want] = [await prefillLogits(fromGguf), await prefillLogits(dense)];
    for (const [i, v] of want.entries()) expect(got[i]).toBeCloseTo(v, 4);
    const tokens = async (model: LlamaModel) => {
      const out: number[] = [];
      for await (const t of model.generate(PROMPT, { maxNewTokens: 8 })) out.push(t);
      return out;
    };
    expect(await tokens(fromGguf)).toEqual(await tokens(dense));
  });

  describe('refuses files the decoder cannot run, before reading weights', () => {
    const json = tinyLlamaConfig({ rms_norm_eps: 2 ** -17 });
    const weights = tinyLlamaWeights(json, 12);
    const edited = async (edit: (w: TinyWeights) => void, typeOf?: (n: string) => GgmlType) => {
      const copy: TinyWeights = new Map(weights);
      edit(copy);
      const path = join(dir, `edited-${files++}.gguf`);
      const contents = llamaToGguf(parseLlamaConfig(json), copy, { typeOf });
      await writeGgufFile(path, contents);
      return loadGgufLlama(backend, path).catch((e: unknown) => e);
    };

    it('a missing weight', async () => {
      const error = await edited((w) => w.delete('model.layers.1.mlp.up_proj.weight'));
      expect(error).toBeInstanceOf(InvalidArgumentError);
      expect(String(error)).toMatch(/'blk\.1\.ffn_up\.weight' is missing.*\[91, 64\] \(dims \[64, 91\]\)/);
    });

    it('a weight of the wrong shape', async () => {
      const error = await edited((w) =>
        w.set('model.layers.0.mlp.down_proj.weight', { shape: [91, 64], data: new Float32Array(91 * 64) }),
      );
      expect(error).toBeInstanceOf(ShapeError);
      expect(String(error)).toMatch(/'blk\.0\.ffn_down\.weight' has the wrong shape/);
    });

    it('a tensor it does not use, and a quantized norm', async () => {
      const path = join(dir, `extra-${files++}.gguf`);
      const contents = llamaToGguf(parseLlamaConfig(json), weights);
      await writeGgufFile(path, {
        ...contents,
        tensors: [
          ...contents.tensors,
          { name: 'blk.0.attn_qkv.weight', type: 'F32', shape: [8], values: new Float32Array(8) },
        ],
      });
      expect(String(await loadGgufLlama(backend, path).catch((e: unknown) => e))).toMatch(
        /'blk\.0\.attn_qkv\.weight'.*the file has a tensor the decoder does not use/,
      );
      const error = await edited(
        () => {},
        (n) => (n === 'model.norm.weight' ? 'Q8_0' : 'F32'),
      );
      expect(String(error)).toMatch(/norm or bias 'output_norm\.weight' is not a float tensor.*Q8_0/);
    });

    it('float matrices of different types, unless a weightDtype is given', async () => {
      const error = await edited(
        () => {},
        (n) => (n.endsWith('up_proj.weight') ? 'BF16' : 'F32'),
      );
      expect(String(error)).toMatch(/stored in another type.*F32 and BF16/);
    });
  });
});
