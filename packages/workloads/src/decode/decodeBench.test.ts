import { readFile, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { toHostArray } from '@rayo/core';
import { openNodeFile, SafetensorsFile } from '@rayo/train';
import { temporaryDirectories } from '@rayo/train-testkit';
import { describe, expect, it } from 'vitest';
import {
  cacheBytesPerStep,
  DECODE_CONFIGS,
  decodeAgreement,
  decodeBench,
  decodePrompt,
  decodeSummary,
  firstDisagreement,
  maxAbsDiff,
  parseDecodeArgs,
  TORCH_REFERENCE_RUN,
  topMargin,
} from './decodeBench.js';
import type { DecodeSettings } from './decodeRun.js';
import { writeSeededLlama } from './seededLlama.js';

const tempDir = temporaryDirectories('rayo-decode-');

/** The tiny model on the cpu backend, in fresh folders. */
async function tinySettings(overrides: Partial<DecodeSettings>): Promise<DecodeSettings> {
  return {
    config: 'llama-tiny',
    dtype: 'f32',
    kvDtype: 'f32',
    backends: ['cpu'],
    promptTokens: 12,
    newTokens: 6,
    warmupTokens: 1,
    seed: 0,
    baseline: 'none',
    torchDevice: 'cpu',
    weights: await tempDir(),
    out: await tempDir(),
    profile: false,
    profileRepetitions: 1,
    hostTokens: 1,
    quant: 'none',
    ...overrides,
  };
}

describe('decode-bench', () => {
  it('parses its options and refuses bad ones', () => {
    const s = parseDecodeArgs(['--config', 'llama-tiny', '--prompt', '16', '--new', '6', '--warmup', '1']);
    expect(s).toMatchObject({
      config: 'llama-tiny',
      promptTokens: 16,
      newTokens: 6,
      warmupTokens: 1,
      baseline: 'none',
      dtype: 'f32',
      kvDtype: 'f32',
    });
    expect(s.backends).toEqual(['cuda', 'wgpu']);
    expect(parseDecodeArgs(['--dtype', 'bf16', '--kv-dtype', 'f16'])).toMatchObject({
      dtype: 'bf16',
      kvDtype: 'f16',
    });
    // The cache follows the weights unless named, as LlamaModel's default does.
    expect(parseDecodeArgs(['--dtype', 'bf16'])).toMatchObject({ dtype: 'bf16', kvDtype: 'bf16' });
    expect(() => parseDecodeArgs(['--dtype', 'fp8'])).toThrow(/--dtype must be f32, f16 or bf16, got fp8/);
    expect(() => parseDecodeArgs(['--kv-dtype', 'f64'])).toThrow(/--kv-dtype must be f32, f16 or bf16/);
    expect(s).toMatchObject({ profile: false, profileRepetitions: 10, hostTokens: 32 });
    // The cache holds the prompt and the new tokens unless --max-sequence asks for more rows.
    expect(s).not.toHaveProperty('maxSequence');
    const rows = ['--prompt', '16', '--new', '6', '--warmup', '1', '--max-sequence'];
    expect(parseDecodeArgs([...rows, '2048'])).toMatchObject({ maxSequence: 2048 });
    expect(() => parseDecodeArgs([...rows, '21'])).toThrow(/--max-sequence must be an integer >= 22/);
    expect(parseDecodeArgs(['--profile', '--profile-reps', '4', '--host-tokens', '8'])).toMatchObject({
      profile: true,
      profileRepetitions: 4,
      hostTokens: 8,
    });
    expect(() => parseDecodeArgs(['--profile-reps', '0'])).toThrow(/--profile-reps must be an integer >= 1/);
    expect(() => parseDecodeArgs(['--config', 'gpt'])).toThrow(/unknown --config 'gpt'/);
    expect(() => parseDecodeArgs(['--new', '4', '--warmup', '3'])).toThrow(/--warmup must leave tokens/);
    expect(() => parseDecodeArgs(['--baseline', 'jax'])).toThrow(/torch or none/);
    expect(s.quant).toBe('none');
    expect(parseDecodeArgs(['--quant', 'q4g32']).quant).toBe('q4g32');
    expect(parseDecodeArgs(['--quant', 'q4g32', '--quant-head']).quantHead).toBe(true);
    expect(parseDecodeArgs(['--quant', 'q4g32']).quantHead).toBeUndefined();
    expect(parseDecodeArgs(['--quant', 'q4g32', '--quant-on', 'host']).quantOn).toBe('host');
    expect(parseDecodeArgs(['--quant', 'q4k']).quant).toBe('q4k');
    expect(parseDecodeArgs(['--quant', 'q6k']).quant).toBe('q6k');
    expect(parseDecodeArgs(['--quant', 'q5k']).quant).toBe('q5k');
    expect(parseDecodeArgs(['--quant', 'q5g32']).quant).toBe('q5g32');
    expect(parseDecodeArgs(['--quant', 'q5g32a']).quant).toBe('q5g32a');
    expect(() => parseDecodeArgs(['--quant', 'q4g32', '--quant-on', 'gpu'])).toThrow(/--quant-on/);
    expect(() => parseDecodeArgs(['--quant-on', 'host'])).toThrow(/needs --quant/);
    expect(() => parseDecodeArgs(['--quant-head'])).toThrow(/--quant-head needs --quant/);
    expect(() => parseDecodeArgs(['--quant', 'q2'])).toThrow(
      /--quant must be q8, q4g32, q4g128, q8g32, q8g16, q4g32a, q8g32a, q4k, q6k, q5k, q5g32, q5g32a or none/,
    );
  });

  it('writes the seeded checkpoint once, and the same bytes for the same seed', async () => {
    const a = await tempDir();
    const b = await tempDir();
    const config = DECODE_CONFIGS['llama-tiny']!;
    const bytes = await writeSeededLlama(a, config, 5);
    await writeSeededLlama(b, config, 5);
    const file = join(a, 'model.safetensors');
    const [fa, fb] = await Promise.all([readFile(file), readFile(join(b, 'model.safetensors'))]);
    expect(fa.equals(fb)).toBe(true);
    // The header is padded so that the data starts 8-byte aligned, and the data is every weight once.
    const headerLength = Number(fa.readBigUInt64LE(0));
    expect((8 + headerLength) % 8).toBe(0);
    expect(fa.length - 8 - headerLength).toBe(bytes);
    const before = (await stat(file)).mtimeMs;
    await writeSeededLlama(a, config, 5);
    expect((await stat(file)).mtimeMs).toBe(before);
    await writeSeededLlama(a, config, 6);
    expect((await readFile(file)).equals(fa)).toBe(false);
  });

  it('writes the seeded checkpoint in bf16 and f16: the f32 values rounded, half the bytes', async () => {
    const config = DECODE_CONFIGS['llama-tiny']!;
    const f32Dir = await tempDir();
    const f32Bytes = await writeSeededLlama(f32Dir, config, 5);
    const f32 = await SafetensorsFile.open(await openNodeFile(join(f32Dir, 'model.safetensors')));
    for (const dtype of ['bf16', 'f16'] as const) {
      const dir = await tempDir();
      expect(await writeSeededLlama(dir, config, 5, dtype)).toBe(f32Bytes / 2);
      expect(JSON.parse(await readFile(join(dir, 'config.json'), 'utf8')).torch_dtype).toBe(
        dtype === 'bf16' ? 'bfloat16' : 'float16',
      );
      const half = await SafetensorsFile.open(await openNodeFile(join(dir, 'model.safetensors')));
      for (const name of [
        'model.embed_tokens.weight',
        'model.layers.1.mlp.down_proj.weight',
        'model.norm.weight',
      ]) {
        expect(half.entries.get(name)!.dtype).toBe(dtype);
        expect(await half.readAs(name, dtype)).toEqual(toHostArray(dtype, await f32.readF32(name)));
      }
      await half.file.close();
    }
    await f32.file.close();
  });

  it('compares runs token by token and logits element by element', () => {
    expect(firstDisagreement([1, 2, 3], [1, 2, 3])).toBe(-1);
    expect(firstDisagreement([1, 2, 3], [1, 5, 3])).toBe(1);
    expect(firstDisagreement([1, 2], [1, 2, 3])).toBe(2);
    expect(maxAbsDiff(Float32Array.of(1, 2), Float32Array.of(1.5, 1))).toBe(1);
    expect(maxAbsDiff(Float32Array.of(1), Float32Array.of(1, 2))).toBe(Number.POSITIVE_INFINITY);
    expect(decodePrompt(100, 5, 0)).toEqual(decodePrompt(100, 5, 0));
  });

  it('checks half runs against PyTorch running rayo’s arithmetic, and PyTorch’s half runs for information', () => {
    const logits = Float32Array.of(1, 2);
    const half = decodeAgreement([
      { name: 'cuda', tokens: [1, 2, 3], logits: Float32Array.of(1, 2.5) },
      { name: 'wgpu', tokens: [1, 2, 4], logits },
      { name: TORCH_REFERENCE_RUN, tokens: [1, 2, 3], logits },
      { name: 'torch-eager', tokens: [1, 9, 9], logits },
    ]);
    expect(half).toEqual([
      { run: 'cuda', reference: TORCH_REFERENCE_RUN, firstDisagreement: -1, logitsMaxDiff: 0.5, gate: true },
      { run: 'wgpu', reference: TORCH_REFERENCE_RUN, firstDisagreement: 2, logitsMaxDiff: 0, gate: true },
      { run: 'torch-eager', reference: TORCH_REFERENCE_RUN, firstDisagreement: 1, gate: false },
    ]);
    // f32: the first run is the reference, and PyTorch's runs must agree with it
    const f32 = decodeAgreement([
      { name: 'cuda', tokens: [1, 2], logits },
      { name: 'torch-graph', tokens: [1, 3], logits },
    ]);
    expect(f32).toEqual([
      { run: 'torch-graph', reference: 'cuda', firstDisagreement: 1, logitsMaxDiff: 0, gate: true },
    ]);
    expect(decodePrompt(100, 5, 0).every((t) => t >= 0 && t < 100)).toBe(true);
  });

  it('lets runs part at a near tie of the reference, and only there', () => {
    const reference = {
      name: 'cuda',
      tokens: [1, 2, 3, 4],
      logits: Float32Array.of(40, -30),
      margins: [3, 2, 0.5, 4],
    };
    const at = (tokens: number[], logits: Float32Array) =>
      decodeAgreement([reference, { name: 'wgpu', tokens, logits }])[0]!;
    // Prompt logits 1 apart, parting where the reference's top two are 0.5 apart: a near tie.
    expect(at([1, 2, 9, 9], Float32Array.of(41, -30))).toEqual({
      run: 'wgpu',
      reference: 'cuda',
      firstDisagreement: 2,
      logitsMaxDiff: 1,
      nearTie: { margin: 0.5, of: 'cuda' },
      gate: true,
    });
    // Parting where the reference was sure (2 apart): a failure.
    expect(at([1, 9, 9, 9], Float32Array.of(41, -30)).nearTie).toBeUndefined();
    // Logits apart by more than 5% of their size: a fault, not rounding, wherever they part.
    expect(at([1, 2, 9, 9], Float32Array.of(43, -30)).nearTie).toBeUndefined();
    // PyTorch's reference records no margins: the compared run's own, at the same context, judge.
    const torch = { name: 'torch-reference', tokens: [1, 2, 3, 4], logits: Float32Array.of(40, -30) };
    const run = (margins: number[]) =>
      decodeAgreement([
        torch,
        { name: 'cuda', tokens: [1, 2, 9, 9], logits: Float32Array.of(41, -30), margins },
      ])[0]!;
    expect(run([3, 2, 0.5, 4]).nearTie).toEqual({ margin: 0.5, of: 'cuda' });
    expect(run([3, 2, 1.5, 4]).nearTie).toBeUndefined();
    expect(topMargin(Float32Array.of(1, 5, 3, 5))).toBe(0);
    expect(topMargin(Float32Array.of(1, 5, 3))).toBe(2);
  });

  it("counts the KV cache a step reads in the limit: Llama-3.2-1B's at 8,192 cached tokens is 270 MB in bf16", () => {
    const settings = { kvDtype: 'bf16', promptTokens: 8192, newTokens: 64 } as const;
    // 16 layers × 8 kv heads × 64 × (8,192 + 31 + 1 rows) × K and V × 2 bytes.
    expect(cacheBytesPerStep(DECODE_CONFIGS['llama-3.2-1b']!, settings)).toBe(16 * 8 * 64 * 8224 * 2 * 2);
    // Without head_dim: hidden_size / heads; f32 caches take 4 bytes.
    expect(cacheBytesPerStep(DECODE_CONFIGS['llama-d2048-hd64']!, { ...settings, kvDtype: 'f32' })).toBe(
      8 * 8 * 64 * 8224 * 2 * 4,
    );
  });

  it('decodes the tiny model on the cpu backend and reports ms per token against the limit', async () => {
    const out = await tempDir();
    const settings = await tinySettings({ out, profile: true, profileRepetitions: 2, hostTokens: 2 });
    const report = await decodeBench(settings, () => {});
    const cpu = report.backends[0]!;
    expect(cpu.status).toBe('ok');
    expect(cpu.run!.tokens).toHaveLength(6);
    expect(cpu.run!.msPerToken).toBeGreaterThan(0);
    expect(report.weightBytes).toBeGreaterThan(0);
    expect(report.cacheBytes).toBe(cacheBytesPerStep(report.hfConfig, report.settings));
    expect(report.limitMs).toBeCloseTo(
      ((report.weightBytes + report.cacheBytes) / (report.bandwidthGbps! * 1e9)) * 1e3,
      9,
    );
    expect(report.torch).toEqual({
      status: 'unavailable',
      reason: 'not requested (--baseline torch runs it)',
    });
    const summary = decodeSummary(report);
    expect(summary).toMatch(
      /^run\s+ms\/token\s+device ms\/step\s+host ms\/token\s+tokens\/s\s+prefill ms\s+of limit/,
    );
    // The cpu backend has no device clock: no split, said so rather than guessed.
    expect(summary).toMatch(/\ncpu\s+[\d.]+\s+—\s+—\s+[\d.]+.*no device clock/);
    expect(cpu.deviceMsPerStep).toBeUndefined();
    expect(cpu.hostMsPerToken).toBeUndefined();
    expect(cpu.profileError).toBeUndefined();
    expect(cpu.profile!.deviceClock).toBe(false);
    expect(cpu.profile!.calls).toBe(cpu.profile!.groups.reduce((a, g) => a + g.calls, 0));
    expect(cpu.hostPhases!.tokens).toBe(2);
    expect(summary).toContain('cpu: the decode step, kernel by kernel');
    expect(summary).toContain('cpu: host phases of a replayed token');
    expect(summary).toMatch(/reading the logits instead of one i32 costs -?[\d.]+ µs more/);
    const json = JSON.parse(await readFile(join(out, 'report.json'), 'utf8'));
    expect(json.backends[0].run.tokens).toEqual(cpu.run!.tokens);
    expect(json.backends[0].logits).toBeUndefined();
    expect(json.backends[0].profile.groups.length).toBe(cpu.profile!.groups.length);
    const md = await readFile(join(out, 'report.md'), 'utf8');
    expect(md).toContain('# rayo decode-bench');
    expect(md).toContain('### cpu: the decode step, kernel by kernel');
    expect(md).toMatch(/\| rmsNormMatmul \| \[1, 64\] · \[64\] · \[512, 64\] \| eps [\d.e-]+ \| 1 \|/);
    expect(summary).toContain('of f32 weights, f32 KV cache and');
  });

  it('decodes the tiny model in bf16 with a bf16 cache, the limit from the bf16 bytes', async () => {
    const base = await tinySettings({});
    const f32 = await decodeBench(base, () => {});
    const bf16 = await decodeBench(
      { ...base, dtype: 'bf16', kvDtype: 'bf16', out: await tempDir() },
      () => {},
    );
    const cpu = bf16.backends[0]!;
    expect(cpu.status).toBe('ok');
    expect(cpu.run!.tokens).toHaveLength(6);
    expect(bf16.weightBytes).toBe(f32.weightBytes / 2);
    expect(bf16.limitMs).toBeCloseTo(
      ((bf16.weightBytes + bf16.cacheBytes) / (bf16.bandwidthGbps! * 1e9)) * 1e3,
      9,
    );
    expect(decodeSummary(bf16)).toContain('of bf16 weights, bf16 KV cache and');
    // The profile's bytes are the kernels' costs in the actual dtypes: the weights read as bf16.
    const head = cpu.profile!.groups.find((g) => g.kernel === 'rmsNormMatmul')!;
    const f32Head = f32.backends[0]!.profile!.groups.find((g) => g.kernel === 'rmsNormMatmul')!;
    expect(head.bytesPerCall!).toBeLessThan(f32Head.bytesPerCall!);
    // Seeded so that greedy choices are decisive: bf16 picks the tokens of f32.
    expect(cpu.run!.tokens).toEqual(f32.backends[0]!.run!.tokens);
  });

  it('decodes with quantized projections: the bytes read, and the model against itself in f32', async () => {
    const base = await tinySettings({});
    const f32 = await decodeBench(base, () => {});
    for (const quant of ['q8', 'q4g32'] as const) {
      const report = await decodeBench({ ...base, quant, out: await tempDir() }, () => {});
      const cpu = report.backends[0]!;
      expect(cpu.status).toBe('ok');
      expect(cpu.run!.tokens).toHaveLength(6);
      const q = cpu.quality!;
      expect(q.weights.format).toBe(quant);
      // The limit is from the bytes a step reads: the projections as codes and scales.
      expect(report.checkpointBytes).toBe(f32.weightBytes);
      expect(report.weightBytes).toBe(f32.weightBytes - q.weights.denseBytes + q.weights.quantizedBytes);
      expect(report.weightBytes).toBeLessThan(f32.weightBytes);
      expect(report.cacheBytes).toBe(cacheBytesPerStep(report.hfConfig, report.settings));
      expect(report.limitMs).toBeCloseTo(
        ((report.weightBytes + report.cacheBytes) / (report.bandwidthGbps! * 1e9)) * 1e3,
        9,
      );
      expect(q.positions).toBe(6);
      expect(q.top1Agreement).toBeGreaterThan(0.5);
      expect(q.logitsMaxError).toBeGreaterThan(0);
      expect(q.logitsMeanError).toBeLessThanOrEqual(q.logitsMaxError);
      if (quant === 'q8') expect(q.firstDisagreement).toBe(-1);
      const summary = decodeSummary(report);
      expect(summary).toContain(`of f32 weights with ${quant} projections, f32 KV cache and`);
      expect(summary).toMatch(new RegExp(`cpu ${quant}: projections [\\d.]+ GB instead of [\\d.]+ GB`));
      // The cpu backend quantizes on the host, and the report says so with the time it took.
      expect(q.weights.path).toBe('host');
      expect(summary).toMatch(/quantized on the host in [\d.]+ s \(weights max/);
      expect(summary).toMatch(/top-1 agreement [\d.]+% over 6 positions/);
    }
  }, 120_000);
});
