import { open, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { bytesPerElement, sizeOf } from '@rayo/core';
import { type LlamaWeightDType, llamaWeightShapes, parseLlamaConfig, Rng, roundF32To } from '@rayo/train';

/**
 * A Llama checkpoint in the Hugging Face layout whose weights come from a
 * seed, written once and reused: what the decode benchmark and its PyTorch
 * baseline both load. The weights are uniform with the standard deviations
 * below, chosen so that greedy decoding is decisive (the head spreads the
 * logits by about 9 nats) and every framework picks the same tokens.
 */

/** Standard deviations of the seeded weights. */
const STD = { embedding: 1, projection: 0.02, head: 0.2 } as const;

/** Writes in pieces of this many elements, so that no buffer holds a whole tensor of a large model. */
const PIECE = 1 << 22;

function stdOf(name: string): number {
  if (name === 'model.embed_tokens.weight') return STD.embedding;
  if (name === 'lm_head.weight') return STD.head;
  return STD.projection;
}

/** Fills `out` as the tensor `name` is seeded: norms near 1, the rest uniform with its standard deviation. */
function fillPiece(name: string, rng: Rng, out: Float32Array): void {
  if (name.endsWith('norm.weight')) {
    // Small tensors: one by one, so that 1 + u is rounded to f32 once.
    for (let i = 0; i < out.length; i++) out[i] = 1 + rng.uniform(-0.1, 0.1);
    return;
  }
  const a = stdOf(name) * Math.sqrt(3);
  rng.fillUniform(out, -a, a);
}

const STAMP = 'rayo-seeded-llama/1';

/** The safetensors name and the Hugging Face `torch_dtype` of each weight dtype. */
const FORMATS = {
  f32: { format: 'F32', torch: 'float32' },
  f16: { format: 'F16', torch: 'float16' },
  bf16: { format: 'BF16', torch: 'bfloat16' },
} as const satisfies Record<LlamaWeightDType, { format: string; torch: string }>;

/**
 * Writes `config.json` and `model.safetensors` into `dir` from `seed`, every
 * tensor in `dtype` (default f32; the f32 values rounded once to nearest
 * even, so that the checkpoints of one seed are one model up to rounding),
 * tensor by tensor, unless the folder already holds the same model (the
 * same config, seed and dtype, recorded beside it). Returns the bytes of the
 * weights.
 */
export async function writeSeededLlama(
  dir: string,
  hfConfig: Record<string, unknown>,
  seed: number,
  dtype: LlamaWeightDType = 'f32',
): Promise<number> {
  const config = parseLlamaConfig(hfConfig);
  const shapes = [...llamaWeightShapes(config)];
  // An f32 checkpoint keeps the stamp it had before dtypes were a choice, so that one on disk is reused.
  const stamp = JSON.stringify({
    stamp: STAMP,
    seed,
    config: hfConfig,
    ...(dtype === 'f32' ? {} : { dtype }),
  });
  const width = bytesPerElement(dtype);
  const weightBytes = shapes.reduce((sum, [, shape]) => sum + width * sizeOf(shape), 0);
  try {
    const existing = JSON.parse(await readFile(join(dir, 'rayo-seed.json'), 'utf8'));
    if (JSON.stringify(existing) === stamp) return weightBytes;
  } catch {
    // No model here yet, or another one: write it.
  }
  const { format, torch } = FORMATS[dtype];
  await writeFile(
    join(dir, 'config.json'),
    `${JSON.stringify({ ...hfConfig, torch_dtype: torch }, null, 2)}\n`,
  );
  const header: Record<string, unknown> = { __metadata__: { format: 'pt', seeded: STAMP } };
  let offset = 0;
  for (const [name, shape] of shapes) {
    const bytes = width * sizeOf(shape);
    header[name] = { dtype: format, shape, data_offsets: [offset, offset + bytes] };
    offset += bytes;
  }
  // The data starts 8-byte aligned: pad the header with spaces, as the format allows.
  let json = JSON.stringify(header);
  json += ' '.repeat((8 - ((8 + json.length) % 8)) % 8);
  const file = await open(join(dir, 'model.safetensors'), 'w');
  try {
    const prefix = Buffer.alloc(8);
    prefix.writeBigUInt64LE(BigInt(Buffer.byteLength(json)));
    await file.write(prefix);
    await file.write(json);
    const rng = new Rng(seed);
    const piece = new Float32Array(PIECE);
    for (const [name, shape] of shapes) {
      const tensorRng = rng.fork();
      for (let done = 0, size = sizeOf(shape); done < size; done += PIECE) {
        const part = piece.subarray(0, Math.min(PIECE, size - done));
        fillPiece(name, tensorRng, part);
        const stored = roundF32To(dtype, part);
        await file.write(new Uint8Array(stored.buffer, stored.byteOffset, stored.byteLength));
      }
    }
  } finally {
    await file.close();
  }
  await writeFile(join(dir, 'rayo-seed.json'), stamp);
  return weightBytes;
}
