import type { PythonScriptOutcome } from '@rayo/bench';
import { type Backend, probeBackends } from '@rayo/core';
import { LlamaModel, type LlamaPrefillPrecision, parseLlamaConfig } from '@rayo/train';
import { createBackendFromEnvironment } from '../backendFromEnvironment.js';
import { runCheckpointBaseline } from './checkpointBaseline.js';
import type { DecodeSettings } from './decodeRun.js';
import { profileStep, type StepProfile } from './stepProfile.js';

// decode-bench's prefill measurement: time to first token (the prompt read,
// its first token on the host) for prompts of several lengths, on each rayo
// backend and in PyTorch (SDPA's flash backend, eager and torch.compile), with
// the tensor-core limit: the prompt's FLOPs over a measured bf16 GEMM peak.

/** The prompt lengths of `--prefill` without a list. */
export const PREFILL_LENGTHS = [512, 2048, 8192, 32768] as const;

export interface PrefillRow {
  readonly tokens: number;
  readonly ttftMs?: number;
  readonly tokensPerSecond?: number;
  /**
   * The most device memory allocated while this length ran (weights, cache
   * and the prompt's working memory): rayo's allocator peak and PyTorch's
   * `max_memory_allocated`, each reset before the length's first run.
   */
  readonly peakBytes?: number | null;
  readonly error?: string;
}

export interface PrefillBackendResult {
  readonly backend: string;
  readonly device: string;
  readonly status: 'ok' | 'error' | 'unavailable';
  readonly reason?: string;
  readonly lengths?: readonly PrefillRow[];
  /** With --profile: one chunk of the longest prompt (at most `prefillChunk` tokens) from row 0, grouped by kernel. */
  readonly profile?: StepProfile;
  readonly profileTokens?: number;
  readonly profileError?: string;
}

export interface TorchPrefillOutput {
  readonly schema: 'rayo-prefill-torch/1';
  readonly available: boolean;
  readonly reason?: string;
  readonly device?: string;
  readonly attention?: string;
  /** torch.matmul of two 8192² bf16 matrices, TFLOP/s. */
  readonly bf16PeakTflops?: number | null;
  readonly results: Readonly<
    Record<string, { readonly lengths: readonly PrefillRow[] } | { readonly error: string }>
  >;
}

export interface PrefillReport {
  readonly lengths: readonly number[];
  /** FLOPs of each length's prompt: the products of every layer, causal attention, the head on one row. */
  readonly flops: readonly number[];
  readonly backends: readonly PrefillBackendResult[];
  readonly torch: PythonScriptOutcome<TorchPrefillOutput>;
}

/**
 * FLOPs of a prompt of `n` tokens: 2·n per weight of the layers' projections,
 * causal attention's two products (2·n²·heads·headDim), and the head on the
 * last row (what the first token needs).
 */
export function prefillFlops(hfConfig: Record<string, unknown>, n: number): number {
  const c = parseLlamaConfig(hfConfig);
  const d = c.hiddenSize;
  const qDim = c.numAttentionHeads * c.headDim;
  const kvDim = c.numKeyValueHeads * c.headDim;
  const perLayer = d * (qDim + 2 * kvDim) + qDim * d + 3 * d * c.intermediateSize;
  const attention = 2 * n * n * qDim;
  return c.numHiddenLayers * (2 * n * perLayer + attention) + 2 * d * c.vocabSize;
}

/** The prompt of `n` tokens: ids drawn from the seed. */
function promptOf(vocab: number, n: number, seed: number): number[] {
  let state = (seed + 1) * 48271;
  return Array.from({ length: n }, () => {
    state = (state * 16807) % 2147483647;
    return state % vocab;
  });
}

/** Untimed runs of each length before the timed ones, in milliseconds at least. */
const WARM_MS = 500;

/** Time to first token of each length on one backend: untimed runs for WARM_MS, then the median of `repeats`. */
export async function prefillOnBackend(
  backend: Backend,
  dir: string,
  vocab: number,
  settings: Pick<
    DecodeSettings,
    'dtype' | 'kvDtype' | 'seed' | 'quant' | 'profile' | 'profileRepetitions'
  > & {
    readonly lengths: readonly number[];
    readonly repeats: number;
    readonly prefillPrecision?: LlamaPrefillPrecision;
    readonly prefillChunk?: number;
  },
): Promise<Pick<PrefillBackendResult, 'lengths' | 'profile' | 'profileTokens' | 'profileError'>> {
  using model = await LlamaModel.load(backend, dir, {
    maxSequence: Math.max(...settings.lengths),
    weightDtype: settings.dtype,
    kvCacheDtype: settings.kvDtype,
    ...(settings.quant === 'none' ? {} : { weightFormat: settings.quant }),
    ...(settings.prefillPrecision ? { prefillPrecision: settings.prefillPrecision } : {}),
    ...(settings.prefillChunk ? { prefillChunk: settings.prefillChunk } : {}),
  });
  const firstToken = async (prompt: readonly number[]) => {
    for await (const _ of model.generate(prompt, { maxNewTokens: 1, temperature: 0 })) break;
  };
  const rows: PrefillRow[] = [];
  for (const n of settings.lengths) {
    const prompt = promptOf(vocab, n, settings.seed);
    try {
      backend.resetPeakMemory();
      // Untimed: once, then for half a second more (the GPU's clocks ramp up under load), as the PyTorch baseline does.
      await firstToken(prompt);
      const warmUntil = performance.now() + WARM_MS;
      while (performance.now() < warmUntil) await firstToken(prompt);
      const times: number[] = [];
      for (let i = 0; i < settings.repeats; i++) {
        await backend.sync();
        const start = performance.now();
        await firstToken(prompt);
        times.push(performance.now() - start);
      }
      times.sort((a, b) => a - b);
      const ms = times[Math.floor(times.length / 2)]!;
      const peakBytes = backend.memory().peakAllocatedBytes;
      rows.push({ tokens: n, ttftMs: ms, tokensPerSecond: n / (ms * 1e-3), peakBytes });
    } catch (error) {
      rows.push({ tokens: n, error: error instanceof Error ? error.message : String(error) });
    }
  }
  if (!settings.profile) return { lengths: rows };
  // One chunk on the device alone (recorded whole, so no host time between
  // its kernels): set against the time to first token, what the host adds.
  const tokens = Math.min(Math.max(...settings.lengths), model.prefillChunk);
  try {
    using ids = backend.upload(Int32Array.from(promptOf(vocab, tokens, settings.seed)), [tokens], 'i32');
    const profile = await profileStep(
      backend,
      (runner, made) => model.recordChunk(runner, ids, 0, made, true),
      {
        repetitions: settings.profileRepetitions,
      },
    );
    return { lengths: rows, profile, profileTokens: tokens };
  } catch (error) {
    return { lengths: rows, profileError: error instanceof Error ? error.message : String(error) };
  }
}

export const TORCH_PREFILL_SCRIPT = 'torch_prefill_baseline.py';

/** Runs the PyTorch prefill baseline on the checkpoint in `dir`; never throws for a missing Python, torch or GPU. */
export async function runTorchPrefill(
  dir: string,
  settings: Pick<DecodeSettings, 'out' | 'torchDevice' | 'dtype' | 'seed'> & {
    readonly lengths: readonly number[];
    readonly repeats: number;
  },
): Promise<PythonScriptOutcome<TorchPrefillOutput>> {
  return runCheckpointBaseline<TorchPrefillOutput>({
    script: TORCH_PREFILL_SCRIPT,
    dir,
    out: settings.out,
    name: 'torch-prefill',
    request: {
      schema: 'rayo-prefill-request/1',
      lengths: settings.lengths,
      repeats: settings.repeats,
      dtype: settings.dtype,
      seed: settings.seed,
    },
    torchDevice: settings.torchDevice,
    label: 'the prefill baseline',
  });
}

/** Every backend's prefill, then PyTorch's (with --baseline torch). */
export async function prefillBench(
  settings: DecodeSettings & { readonly prefillLengths: readonly number[] },
  dir: string,
  hfConfig: Record<string, unknown>,
  log: (line: string) => void,
): Promise<PrefillReport> {
  const lengths = settings.prefillLengths;
  const vocab = hfConfig.vocab_size as number;
  const common = { ...settings, lengths, repeats: settings.prefillRepeats ?? 3 };
  const backends: PrefillBackendResult[] = [];
  for (const status of await probeBackends(settings.backends)) {
    if (!status.available) {
      backends.push({ backend: status.name, device: '', status: 'unavailable', reason: status.reason ?? '' });
      continue;
    }
    const backend = await createBackendFromEnvironment(status.name);
    try {
      const chunks = settings.prefillChunk ? `, chunks of ${settings.prefillChunk}` : '';
      log(`${status.name}: prefill of ${lengths.join(', ')} tokens${chunks}`);
      const result = await prefillOnBackend(backend, dir, vocab, common);
      backends.push({ backend: status.name, device: backend.info.device, status: 'ok', ...result });
      if (result.profileError) log(`${status.name}: prefill profile error: ${result.profileError}`);
      for (const r of result.lengths ?? [])
        log(`${status.name} prefill ${r.tokens}: ${r.ttftMs?.toFixed(1) ?? r.error} ms`);
    } catch (error) {
      const reason = error instanceof Error ? error.message : String(error);
      backends.push({ backend: status.name, device: backend.info.device, status: 'error', reason });
      log(`${status.name}: prefill error: ${reason}`);
    } finally {
      backend.dispose();
    }
  }
  const torch: PythonScriptOutcome<TorchPrefillOutput> =
    settings.baseline === 'torch'
      ? await runTorchPrefill(dir, common)
      : { status: 'unavailable', reason: 'not requested (--baseline torch runs it)' };
  return { lengths, flops: lengths.map((n) => prefillFlops(hfConfig, n)), backends, torch };
}

const fmt = (x: number | undefined | null, digits = 3) =>
  x === undefined || x === null || !Number.isFinite(x) ? '—' : String(Number(x.toPrecision(digits)));

/** The prefill table: time to first token, tokens/s and peak memory per run and length, and the tensor-core limit. */
export function prefillLines(report: PrefillReport): string[] {
  const peak = report.torch.status === 'ok' ? report.torch.output.bf16PeakTflops : undefined;
  const header = ['run', ...report.lengths.map((n) => `TTFT ms / tok/s / peak GiB @${n}`)];
  const cells = (rows: readonly PrefillRow[] | undefined) =>
    report.lengths.map((n) => {
      const r = rows?.find((x) => x.tokens === n);
      if (!r) return '—';
      if (r.error) return `error: ${r.error.slice(0, 60)}`;
      const peak = typeof r.peakBytes === 'number' ? ` / ${fmt(r.peakBytes / 2 ** 30)}` : '';
      return `${fmt(r.ttftMs)} / ${fmt(r.tokensPerSecond, 4)}${peak}`;
    });
  const rows = report.backends.map((b) => [b.backend, ...cells(b.lengths)]);
  if (report.torch.status === 'ok') {
    for (const [method, r] of Object.entries(report.torch.output.results)) {
      rows.push([
        'error' in r ? `torch ${method}: ${r.error}` : `torch ${method}`,
        ...cells('error' in r ? undefined : r.lengths),
      ]);
    }
  } else rows.push([`torch: ${report.torch.reason}`, ...cells(undefined)]);
  if (peak)
    rows.push(['tensor-core limit', ...report.flops.map((f) => `${fmt((f / (peak * 1e12)) * 1e3)} ms`)]);
  const line = (r: readonly string[]) => `| ${r.map((c) => c.replaceAll('|', '\\|')).join(' | ')} |`;
  return [
    '## Prefill: time to first token',
    '',
    'The prompt read and its first token on the host (rayo: `generate` with one new token; PyTorch: the ' +
      'prefill with SDPA and the head on the last row, `.item()`), untimed runs for half a second after a first one, then the median of the ' +
      'timed ones; the peak is the most device memory allocated while the length ran (weights and cache included). ' +
      `The limit is the prompt's FLOPs over the measured bf16 GEMM peak (${fmt(peak, 4)} TFLOP/s, ` +
      'torch.matmul of 8192² bf16).',
    '',
    line(header),
    line(header.map(() => '---')),
    ...rows.map(line),
    ...report.backends.flatMap((b) => prefillProfileLines(b, peak ?? undefined, line)),
  ];
}

const MATMULS = new Set(['matmul', 'batchedMatmul']);

/**
 * A backend's profiled chunk: its device time against the time to first
 * token of the same length (the rest is the host's), where the time goes by
 * kernel family with its FLOP rate against the peak, and the kernel table.
 */
function prefillProfileLines(
  b: PrefillBackendResult,
  peakTflops: number | undefined,
  line: (cells: readonly string[]) => string,
): string[] {
  const p = b.profile;
  if (b.profileError) return ['', `${b.backend}: no prefill profile (${b.profileError})`];
  if (!p?.deviceClock || p.stepDeviceMs === undefined) return [];
  const tflops = (flops: number, us: number) => (us > 0 ? flops / (us * 1e6) : undefined);
  const family = (name: string) =>
    MATMULS.has(name) ? 'matrix products' : name === 'causalAttention' ? name : 'the rest';
  const sums = new Map<string, { us: number; flops: number }>();
  for (const g of p.groups) {
    const s = sums.get(family(g.kernel)) ?? { us: 0, flops: 0 };
    s.us += g.usPerStep ?? 0;
    s.flops += (g.flopsPerCall ?? 0) * g.calls;
    sums.set(family(g.kernel), s);
  }
  const ttft = b.lengths?.find((r) => r.tokens === b.profileTokens)?.ttftMs;
  const parts = [...sums].map(([name, s]) => {
    const rate = tflops(s.flops, s.us);
    const ofPeak =
      rate !== undefined && peakTflops ? `, ${fmt((100 * rate) / peakTflops, 2)}% of the peak` : '';
    return `${name} ${fmt(s.us / 1e3)} ms${s.flops > 0 ? ` (${fmt(rate)} TFLOP/s${ofPeak})` : ''}`;
  });
  const header = ['kernel', 'shapes', 'attrs', 'calls', 'µs/chunk', 'TFLOP/s', '% of chunk'];
  return [
    '',
    `### ${b.backend}: one chunk of ${b.profileTokens} tokens on the device`,
    '',
    `${fmt(p.stepDeviceMs)} ms on the device with no host in between (one recorded batch)` +
      (ttft === undefined
        ? ''
        : `, against ${fmt(ttft)} ms to the first token of ${b.profileTokens} tokens`) +
      `; kernels timed alone: ${parts.join('; ')}.`,
    '',
    line(header),
    line(header.map(() => '---')),
    ...p.groups.map((g) =>
      line([
        g.kernel,
        g.shapes,
        g.attrs || '—',
        String(g.calls),
        fmt(g.usPerStep),
        fmt(g.flopsPerCall && g.usPerCall ? tflops(g.flopsPerCall, g.usPerCall) : undefined),
        g.shareOfStep === undefined ? '—' : `${fmt(100 * g.shareOfStep, 2)}%`,
      ]),
    ),
  ];
}
