import { createCpuBackend } from '@rayo/core';
import { temporaryDirectories } from '@rayo/train-testkit';
import { describe, expect, it } from 'vitest';
import { DECODE_CONFIGS, parseDecodeArgs } from './decodeBench.js';
import { PREFILL_LENGTHS, prefillFlops, prefillLines, prefillOnBackend } from './prefillBench.js';
import { writeSeededLlama } from './seededLlama.js';

describe('decode-bench prefill', () => {
  const tempDir = temporaryDirectories('rayo-prefill-');

  it('parses the prefill flags and refuses bad ones', () => {
    expect(parseDecodeArgs(['--prefill', '512,2048'])).toMatchObject({
      prefillLengths: [512, 2048],
      prefillRepeats: 3,
    });
    expect(parseDecodeArgs(['--prefill', 'all']).prefillLengths).toEqual([...PREFILL_LENGTHS]);
    expect(parseDecodeArgs(['--prefill-only', '--prefill-reps', '2'])).toMatchObject({
      prefillOnly: true,
      prefillLengths: [...PREFILL_LENGTHS],
      prefillRepeats: 2,
    });
    expect(parseDecodeArgs(['--prefill-precision', 'tf32']).prefillPrecision).toBe('tf32');
    expect(parseDecodeArgs(['--prefill-chunk', '8192']).prefillChunk).toBe(8192);
    expect(parseDecodeArgs([]).prefillChunk).toBeUndefined();
    expect(parseDecodeArgs([]).prefillLengths).toBeUndefined();
    expect(() => parseDecodeArgs(['--prefill', '512,x'])).toThrow(/--prefill must be an integer/);
    expect(() => parseDecodeArgs(['--prefill-precision', 'fp8'])).toThrow(/f32, tf32 or bf16/);
    expect(() => parseDecodeArgs(['--prefill-chunk', '0'])).toThrow(/--prefill-chunk/);
  });

  it('counts a prompt’s FLOPs: the layers’ products, causal attention, the head on one row', () => {
    const c = DECODE_CONFIGS['llama-3.2-1b']!;
    // 16 layers of 2048·(2048 + 2·512) + 2048·2048 + 3·2048·8192 weights; attention 2·n²·2048 a layer.
    const perLayer = 2048 * (2048 + 1024) + 2048 * 2048 + 3 * 2048 * 8192;
    const n = 512;
    expect(prefillFlops(c, n)).toBe(16 * (2 * n * perLayer + 2 * n * n * 2048) + 2 * 2048 * 128256);
  });

  it('times the first token of each prompt length on a backend and tabulates it', async () => {
    const dir = await tempDir();
    const config = DECODE_CONFIGS['llama-tiny']!;
    await writeSeededLlama(dir, config, 3, 'bf16');
    const backend = createCpuBackend();
    try {
      const result = await prefillOnBackend(backend, dir, config.vocab_size as number, {
        dtype: 'bf16',
        kvDtype: 'f32',
        seed: 3,
        quant: 'none',
        lengths: [5, 40],
        repeats: 1,
        profile: true,
        profileRepetitions: 1,
      });
      const rows = result.lengths!;
      // The cpu backend has no device clock: the chunk's calls are listed, untimed.
      expect(result.profileError).toBeUndefined();
      expect(result.profileTokens).toBe(40);
      expect(result.profile?.deviceClock).toBe(false);
      expect(result.profile?.groups.some((g) => g.kernel === 'causalAttention')).toBe(true);
      expect(rows.map((r) => [r.tokens, r.error])).toEqual([
        [5, undefined],
        [40, undefined],
      ]);
      for (const r of rows) expect(r.tokensPerSecond).toBeCloseTo(r.tokens / (r.ttftMs! / 1e3));
      // Each length's peak holds the weights and the cache at least, and the longer prompt's more.
      expect(rows[0]!.peakBytes).toBeGreaterThan(0);
      expect(rows[1]!.peakBytes).toBeGreaterThan(rows[0]!.peakBytes!);
      const lines = prefillLines({
        lengths: [5, 40],
        flops: [prefillFlops(config, 5), prefillFlops(config, 40)],
        backends: [{ backend: 'cpu', device: 'cpu', status: 'ok', lengths: rows }],
        torch: { status: 'unavailable', reason: 'not requested' },
      });
      expect(lines.join('\n')).toMatch(
        /\| cpu \| [\d.]+ \/ [\d.]+ \/ [\d.e-]+ \| [\d.]+ \/ [\d.]+ \/ [\d.e-]+ \|/,
      );
    } finally {
      backend.dispose();
    }
  }, 120_000);

  it("sets a profiled chunk against the time to first token, with each family's FLOP rate", () => {
    const group = (kernel: string, usPerCall: number, flopsPerCall: number, calls: number) => ({
      kernel,
      shapes: '-',
      attrs: '',
      calls,
      usPerCall,
      usPerStep: usPerCall * calls,
      flopsPerCall,
    });
    const lines = prefillLines({
      lengths: [2048],
      flops: [1e12],
      backends: [
        {
          backend: 'cuda',
          device: 'gpu',
          status: 'ok',
          lengths: [{ tokens: 2048, ttftMs: 10, tokensPerSecond: 204800 }],
          profileTokens: 2048,
          profile: {
            calls: 3,
            deviceClock: true,
            stepDeviceMs: 6,
            repetitions: 1,
            groups: [
              group('matmul', 2000, 1e12, 2),
              group('causalAttention', 1000, 2e11, 1),
              group('rmsNorm', 500, 0, 2),
            ],
          },
        },
      ],
      torch: { status: 'unavailable', reason: 'not requested' },
    }).join('\n');
    // 2e12 FLOP in 4 ms: 500 TFLOP/s; 2e11 in 1 ms: 200.
    expect(lines).toContain('6 ms on the device with no host in between (one recorded batch), against 10 ms');
    expect(lines).toContain('matrix products 4 ms (500 TFLOP/s)');
    expect(lines).toContain('causalAttention 1 ms (200 TFLOP/s)');
    expect(lines).toContain('the rest 1 ms;'.replace(';', '.'));
    expect(lines).toMatch(/\| matmul \| - \| — \| 2 \| 4000 \| 500 \|/);
  });
});
