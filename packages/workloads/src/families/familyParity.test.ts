import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { createCpuBackend } from '@rayo/core';
import { LlamaModel } from '@rayo/train';
import { temporaryDirectories } from '@rayo/train-testkit';
import { describe, expect, it } from 'vitest';
import { writeSeededLlama } from '../decode/seededLlama.js';
import {
  type FamilyParityReference,
  familyParity,
  type ParityDType,
  type ParitySettings,
  parityTable,
  parseParityArgs,
  type ReferenceRun,
  referenceFor,
} from './familyParity.js';
import { PARITY_FAMILIES, parityFamily } from './parityFamilies.js';

// The harness's Node half against a fake reference: tiny checkpoints of
// three families written as transformers 5 saves them (rope_parameters), and
// reference tokens from rayo's own cpu backend standing in for PyTorch's.

const tempDir = temporaryDirectories('family-parity-');

const FAMILIES = ['llama-3.2-1b', 'qwen2.5-0.5b', 'qwen3-0.6b'] as const;
const PROMPT = [3, 141, 59, 26, 5, 35, 89, 79, 32, 38, 46, 26, 43];
const NEW = 6;

/** A parity family's config at tiny sizes, its RoPE keys moved into transformers 5's rope_parameters. */
function tinyTransformers5(name: string): Record<string, unknown> {
  const {
    rope_theta: theta,
    rope_scaling: scaling,
    ...rest
  } = parityFamily(name)!.config as Record<string, unknown>;
  return {
    ...rest,
    hidden_size: 64,
    intermediate_size: 96,
    num_attention_heads: 4,
    num_key_value_heads: 2,
    ...(rest.head_dim !== undefined ? { head_dim: 24 } : {}),
    num_hidden_layers: 2,
    vocab_size: 257,
    rope_parameters: {
      rope_type: 'default',
      rope_theta: theta,
      ...(scaling as Record<string, unknown> | undefined),
      // Llama 3's bands within a head of 16 or 24.
      ...(scaling ? { original_max_position_embeddings: 64 } : {}),
    },
    transformers_version: '5.0.0',
  };
}

/** The fake reference: rayo's cpu backend, eager, with each step's logit margin, its KV cache in `kvCacheDtype`. */
async function cpuReference(checkpoint: string, kvCacheDtype: 'f32' | 'bf16' = 'f32'): Promise<ReferenceRun> {
  const backend = createCpuBackend();
  try {
    using model = await LlamaModel.load(backend, checkpoint, {
      replay: false,
      fused: false,
      maxSequence: 64,
      kvCacheDtype,
    });
    const tokens: number[] = [];
    const margins: number[] = [];
    let logits = model.prefill(PROMPT);
    for (let i = 0; i < NEW; i++) {
      const all = (await logits.read()) as Float32Array;
      logits.dispose();
      const row = Array.from(all.subarray(all.length - model.config.vocabSize));
      const order = row.map((_, j) => j).sort((a, b) => row[b]! - row[a]!);
      tokens.push(order[0]!);
      margins.push(row[order[0]!]! - row[order[1]!]!);
      if (i + 1 < NEW) logits = model.decode(order[0]!);
    }
    return { checkpoint, tokens, margins };
  } finally {
    backend.dispose();
  }
}

async function fakeReference(): Promise<{ out: string; reference: FamilyParityReference }> {
  const out = await tempDir();
  const families: Record<string, { prompt: number[]; runs: Partial<Record<ParityDType, ReferenceRun>> }> = {};
  for (const [i, name] of FAMILIES.entries()) {
    const runs: Partial<Record<ParityDType, ReferenceRun>> = {};
    for (const dtype of ['f32', 'bf16'] as const) {
      const checkpoint = join(out, 'checkpoints', `${name}-${dtype}`);
      await mkdir(checkpoint, { recursive: true });
      await writeSeededLlama(checkpoint, tinyTransformers5(name), 10 + i, dtype);
      const run = await cpuReference(checkpoint);
      // Under bf16 weights the model's default cache is bf16: its run rounds keys and values too.
      runs[dtype] = dtype === 'bf16' ? { ...run, cacheRounded: await cpuReference(checkpoint, 'bf16') } : run;
    }
    families[name] = { prompt: PROMPT, runs };
  }
  const reference: FamilyParityReference = {
    schema: 'rayo-family-parity/1',
    available: true,
    torch: 'fake',
    transformers: '5.0.0 (fake)',
    device: 'rayo cpu',
    families,
  };
  return { out, reference };
}

function settings(out: string, reference: string, overrides: Partial<ParitySettings> = {}): ParitySettings {
  return {
    ...parseParityArgs(['--backends', 'cpu', '--families', FAMILIES.join(','), '--out', out]),
    reference,
    ...overrides,
  };
}

async function writeReference(out: string, name: string, reference: FamilyParityReference): Promise<string> {
  const path = join(out, name);
  await writeFile(path, JSON.stringify(reference));
  return path;
}

describe('family parity (Node half, against a fake reference)', () => {
  it('loads every family in f32 and bf16, agrees token for token, and prints the table', async () => {
    const { out, reference } = await fakeReference();
    const report = await familyParity(
      settings(out, await writeReference(out, 'reference.json', reference)),
      () => {},
    );
    expect(report.rows).toHaveLength(FAMILIES.length * 2);
    for (const row of report.rows) {
      expect(row.result).toMatchObject({
        verdict: 'same',
        firstDisagreement: -1,
        forcedAgreement: NEW,
        forcedClearDisagreements: 0,
      });
    }
    expect(report.passed).toBe(true);
    const table = parityTable(report);
    expect(table).toMatch(/qwen3-0\.6b\s+bf16\s+bf16\s+cpu\s+6\/6 same\s+6\/6/);
    expect(table).toMatch(/family parity: passed/);

    // The last reference token changed where its margin is clear: the tokens differ, and teacher forcing counts a miss.
    const edited = structuredClone(reference);
    const run = (
      edited.families['qwen2.5-0.5b'] as unknown as { runs: { f32: { tokens: number[]; margins: number[] } } }
    ).runs.f32;
    run.tokens[5] = (run.tokens[5]! + 1) % 257;
    const differs = await familyParity(
      settings(out, await writeReference(out, 'edited.json', edited)),
      () => {},
    );
    const row = differs.rows.find((r) => r.family === 'qwen2.5-0.5b' && r.dtype === 'f32')!;
    expect(row.result).toMatchObject({
      verdict: 'differ',
      firstDisagreement: 5,
      forcedClearDisagreements: 1,
    });
    expect(differs.passed).toBe(false);
    expect(parityTable(differs)).toMatch(/part at 5 \(differ, margin .*\).*5\/6, 1 clear misses/);

    // The same change at a near-tie of the reference is not a failure.
    run.margins[5] = 1e-6;
    const tie = await familyParity(settings(out, await writeReference(out, 'tie.json', edited)), () => {});
    expect(tie.rows.find((r) => r.family === 'qwen2.5-0.5b' && r.dtype === 'f32')!.result).toMatchObject({
      verdict: 'near-tie',
      forcedClearDisagreements: 0,
    });
    expect(tie.passed).toBe(true);
  }, 300_000);

  it('reports a family the reference failed, a missing run and an unknown backend as errors', async () => {
    const out = await tempDir();
    const reference: FamilyParityReference = {
      schema: 'rayo-family-parity/1',
      available: true,
      families: {
        'llama-3.2-1b': { error: 'OutOfMemoryError: CUDA out of memory' },
        'qwen2.5-0.5b': { prompt: PROMPT, runs: {} },
      },
    };
    const path = await writeReference(out, 'reference.json', reference);
    const report = await familyParity(
      settings(out, path, {
        families: [parityFamily('llama-3.2-1b')!, parityFamily('qwen2.5-0.5b')!],
        dtypes: ['f32'],
      }),
      () => {},
    );
    expect(report.rows.map((r) => ('error' in r.result ? r.result.error : 'ok'))).toEqual([
      'the reference failed: OutOfMemoryError: CUDA out of memory',
      'the reference has no f32 run',
    ]);
    expect(report.passed).toBe(false);
    const unknown = await familyParity(
      settings(out, path, { backends: ['no-such-backend'], dtypes: ['f32'] }),
      () => {},
    );
    expect(unknown.rows.every((r) => 'error' in r.result)).toBe(true);
    await writeFile(
      path,
      JSON.stringify({ schema: 'rayo-family-parity/1', available: false, reason: 'no torch', families: {} }),
    );
    await expect(familyParity(settings(out, path), () => {})).rejects.toThrow(
      /the reference could not run: no torch/,
    );
  });

  it("holds cuda's bf16 runs to the reference whose prompt products round their inputs, wgpu's to the exact one", () => {
    const run = {
      checkpoint: 'c',
      tokens: [1, 2],
      margins: [0.5, 0.5],
      promptRounded: { tokens: [1, 3], margins: [0.4, 0.6] },
    };
    expect(referenceFor(run, 'cuda').tokens).toEqual([1, 3]);
    expect(referenceFor(run, 'cuda').checkpoint).toBe('c');
    expect(referenceFor(run, 'wgpu').tokens).toEqual([1, 2]);
    expect(referenceFor({ checkpoint: 'c', tokens: [4], margins: [1] }, 'cuda').tokens).toEqual([4]);
    // A half KV cache: the runs whose keys and values were rounded as stored.
    const cached = {
      ...run,
      cacheRounded: { tokens: [1, 4], margins: [0.5, 0.3] },
      promptCacheRounded: { tokens: [1, 5], margins: [0.4, 0.2] },
    };
    expect(referenceFor(cached, 'wgpu', true).tokens).toEqual([1, 4]);
    expect(referenceFor(cached, 'cuda', true).tokens).toEqual([1, 5]);
    expect(referenceFor(cached, 'cuda', false).tokens).toEqual([1, 3]);
    expect(() => referenceFor(run, 'wgpu', true)).toThrow(/no run with a rounded KV cache.*--kv-dtype f32/);
  });

  it('parses its options and refuses bad ones', () => {
    const s = parseParityArgs([]);
    expect(s.families.map((f) => f.name)).toEqual(PARITY_FAMILIES.map((f) => f.name));
    expect([s.backends, s.dtypes, s.promptTokens, s.newTokens, s.tieMargin, s.kvDtype]).toEqual([
      ['cuda', 'wgpu'],
      ['f32', 'bf16'],
      512,
      128,
      1e-3,
      'default',
    ]);
    expect(parseParityArgs(['--kv-dtype', 'f32']).kvDtype).toBe('f32');
    expect(() => parseParityArgs(['--kv-dtype', 'bf16'])).toThrow(/default or f32, got bf16/);
    expect(() => parseParityArgs(['--families', 'gemma-2b'])).toThrow(/unknown family 'gemma-2b'/);
    expect(() => parseParityArgs(['--dtypes', 'f16'])).toThrow(/f32 and bf16, got f16/);
    expect(() => parseParityArgs(['--prompt', '0'])).toThrow(/--prompt must be an integer >= 1/);
  });

  it('describes real checkpoints: each family config parses as rayo reads it', async () => {
    const { parseLlamaConfig } = await import('@rayo/train');
    for (const family of PARITY_FAMILIES) {
      const config = parseLlamaConfig({ ...family.config, num_hidden_layers: 2 });
      expect(config.family).toBe(family.config.model_type);
    }
  });
});
