import { mkdir, writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { type Backend, copy, isQuantFormat, probeBackends, QUANT_FORMATS } from '@rayo/core';
import {
  LlamaModel,
  type LlamaPrefillPrecision,
  type LlamaQuantizationReport,
  type LlamaWeightDType,
  Rng,
} from '@rayo/train';
import { createBackendFromEnvironment, environmentOptionsNote } from '../backendFromEnvironment.js';
import type { DecodeRun, DecodeSettings } from './decodeRun.js';
import { type HostPhases, measureHostPhases } from './hostPhases.js';
import { PREFILL_LENGTHS, type PrefillReport, prefillBench, prefillLines } from './prefillBench.js';
import { writeSeededLlama } from './seededLlama.js';
import { stepDetail } from './stepDetail.js';
import { PROFILE_HEADER, profileRows, profileStep, profileTotals, type StepProfile } from './stepProfile.js';
import { runTorchDecode, type TorchDecodeEntry, type TorchDecodeOutcome } from './torchDecodeBaseline.js';

/**
 * The decode benchmark: a Llama-shaped model with seeded weights (f32, f16
 * or bf16),
 * written once as a Hugging Face checkpoint, decoded greedily from a prompt
 * on each rayo backend and by PyTorch (eager, and one CUDA graph per step)
 * from the same files in the same run. Reports ms per token against the
 * bandwidth limit (the weights' bytes over the measured copy bandwidth),
 * checks that every run picks the same tokens and that the prompt's logits
 * agree.
 */

/** What every configuration shares: a Llama of 8 layers, d 2048, FFN 5632, vocab 32000, untied head. */
const LLAMA_D2048 = {
  architectures: ['LlamaForCausalLM'],
  hidden_size: 2048,
  intermediate_size: 5632,
  num_hidden_layers: 8,
  vocab_size: 32000,
  max_position_embeddings: 4096,
  rope_theta: 10000,
  rms_norm_eps: 1e-5,
  tie_word_embeddings: false,
  hidden_act: 'silu',
} as const;

// Llama-3.1-8B's shape (seeded weights, plain RoPE): 32 layers, d 4096, FFN 14336, 32 query / 8 kv
// heads of 128, vocabulary 128256, untied head (16.1 GB in bf16).
const LLAMA_8B = {
  ...LLAMA_D2048,
  hidden_size: 4096,
  intermediate_size: 14336,
  num_hidden_layers: 32,
  num_attention_heads: 32,
  num_key_value_heads: 8,
  head_dim: 128,
  vocab_size: 128256,
  max_position_embeddings: 131072,
  rope_theta: 500000,
} as const;

/** Llama-shaped configurations (Hugging Face config.json fields). */
export const DECODE_CONFIGS: Readonly<Record<string, Record<string, unknown>>> = {
  // 32 query / 8 kv heads of 64: 1.97 GB of fp32 weights (0.98 GB in bf16).
  'llama-d2048-hd64': { ...LLAMA_D2048, num_attention_heads: 32, num_key_value_heads: 8 },
  // The same weight bytes with heads of 128 (16 query / 4 kv heads).
  'llama-d2048-hd128': { ...LLAMA_D2048, num_attention_heads: 16, num_key_value_heads: 4 },
  // Llama-3.2-1B's shape (seeded weights, plain RoPE): 16 layers, FFN 8192, 32 query / 8 kv heads of 64,
  // vocabulary 128256, tied head; the prefill benchmark's model (2.47 GB in bf16).
  'llama-3.2-1b': {
    ...LLAMA_D2048,
    intermediate_size: 8192,
    num_hidden_layers: 16,
    num_attention_heads: 32,
    num_key_value_heads: 8,
    head_dim: 64,
    vocab_size: 128256,
    max_position_embeddings: 131072,
    rope_theta: 500000,
    tie_word_embeddings: true,
  },
  'llama-3.1-8b': LLAMA_8B,
  // Four layers of the 8B shape: its products and attention profiled in seconds.
  'llama-8b-l4': { ...LLAMA_8B, num_hidden_layers: 4 },
  // A model a software GPU decodes in seconds (tests, quick checks).
  'llama-tiny': {
    ...LLAMA_D2048,
    hidden_size: 64,
    intermediate_size: 160,
    num_attention_heads: 4,
    num_key_value_heads: 2,
    num_hidden_layers: 2,
    vocab_size: 512,
    max_position_embeddings: 256,
  },
};

export interface DecodeBackendResult {
  readonly backend: string;
  readonly device: string;
  readonly status: 'ok' | 'error' | 'unavailable';
  readonly reason?: string;
  readonly loadMs?: number;
  /** The backend's device copy of 256 MiB, in GB/s (reads + writes). */
  readonly copyGbps?: number;
  readonly run?: DecodeRun;
  /**
   * Median device time of one recorded decode step (one CUDA graph, one
   * command buffer between timestamps); absent where the backend has no
   * device clock (cpu).
   */
  readonly deviceMsPerStep?: number;
  /**
   * The host's own work per replayed token: the submit call (`hostPhases`'
   * enqueue; the step advances its position and picks its token on the
   * device, so nothing is written); absent without a device clock, where the
   * host phases hold the computation too.
   */
  readonly hostMsPerToken?: number;
  /** The step's kernel calls, grouped; timed one group at a time with --profile. */
  readonly profile?: StepProfile;
  /** What one replayed token costs the host, phase by phase. */
  readonly hostPhases?: HostPhases;
  /** Why the profile or the host phases could not be measured (the decode run itself stands). */
  readonly profileError?: string;
  /** The prompt's last-position logits (compared across runs, not written to the report). */
  readonly logits?: Float32Array;
  /**
   * At each generated position, how far the top logit stands above the
   * second (teacher-forced on this run's own tokens): where two runs part,
   * the reference's margin says whether that was a near tie.
   */
  readonly margins?: readonly number[];
  /** With --quant: the quantized model against the same model in f32. */
  readonly quality?: QuantizationQuality;
}

/**
 * How far a model with quantized projections is from the same model in f32,
 * on one backend: its greedy tokens against the f32 model's, and, with both
 * models given the quantized run's tokens (teacher forcing, so one early
 * difference does not make every later position differ), the top-1 agreement
 * and the logits' error at every generated position.
 */
export interface QuantizationQuality {
  readonly weights: LlamaQuantizationReport;
  /** Where the greedy tokens of the two models part (-1: never). */
  readonly firstDisagreement: number;
  /** Positions compared: the prompt's last and every generated one but the last. */
  readonly positions: number;
  /** Fraction of those positions where both models' top-1 token is the same. */
  readonly top1Agreement: number;
  readonly logitsMaxError: number;
  readonly logitsMeanError: number;
}

function quantile(sorted: readonly number[], q: number): number {
  const pos = q * (sorted.length - 1);
  const lo = Math.floor(pos);
  const hi = Math.ceil(pos);
  return sorted[lo]! + (sorted[hi]! - sorted[lo]!) * (pos - lo);
}

/** The prompt: ids drawn from the seed (a fixed, reproducible context). */
export function decodePrompt(vocab: number, length: number, seed: number): number[] {
  const rng = new Rng(seed + 17);
  return Array.from({ length }, () => rng.int(vocab));
}

/** GB/s of a device copy of 256 MiB on `backend` (its own clock where it has one), the median of five. */
async function copyBandwidth(backend: Backend): Promise<number | undefined> {
  const elements = (256 * 2 ** 20) / 4;
  using src = backend.zeros([elements]);
  using dst = backend.zeros([elements]);
  const times: number[] = [];
  for (let i = 0; i < 6; i++) {
    const start = performance.now();
    const device = await backend.deviceTime?.((runner) => runner.run(copy, [src], {}, { out: [dst] }));
    if (device === undefined) {
      backend.run(copy, [src], {}, { out: [dst] });
      await backend.sync();
    }
    if (i > 0) times.push(device ?? performance.now() - start);
  }
  times.sort((a, b) => a - b);
  return (2 * elements * 4) / (quantile(times, 0.5) * 1e-3) / 1e9;
}

/**
 * Loads the checkpoint on `backend`, reads the prompt's logits, then times
 * `generate` greedily: the interval between consecutive tokens, as a caller
 * of the async iterator sees them.
 */
export async function decodeOnBackend(
  backend: Backend,
  dir: string,
  prompt: readonly number[],
  settings: Pick<
    DecodeSettings,
    | 'dtype'
    | 'kvDtype'
    | 'newTokens'
    | 'warmupTokens'
    | 'profile'
    | 'profileRepetitions'
    | 'hostTokens'
    | 'maxSequence'
    | 'quant'
    | 'quantHead'
    | 'quantOn'
    | 'prefillPrecision'
    | 'prefillChunk'
  >,
): Promise<Omit<DecodeBackendResult, 'backend' | 'device' | 'status'>> {
  const copyGbps = await copyBandwidth(backend);
  const loadStart = performance.now();
  const model = await LlamaModel.load(backend, dir, {
    maxSequence: cacheRows(settings, prompt.length),
    weightDtype: settings.dtype,
    kvCacheDtype: settings.kvDtype,
    ...(settings.prefillPrecision ? { prefillPrecision: settings.prefillPrecision } : {}),
    ...(settings.prefillChunk ? { prefillChunk: settings.prefillChunk } : {}),
    ...(settings.quant === 'none' ? {} : { weightFormat: settings.quant }),
    ...(settings.quantHead ? { quantizeHead: true } : {}),
    ...(settings.quantOn ? { quantizeOn: settings.quantOn } : {}),
  });
  await backend.sync();
  const loadMs = performance.now() - loadStart;
  try {
    const logitsTensor = model.prefill(prompt, { lastRows: 1 });
    const logits = (await logitsTensor.read()) as Float32Array;
    logitsTensor.dispose();
    const tokens: number[] = [];
    const intervals: number[] = [];
    const start = performance.now();
    let prefillMs = 0;
    let last = start;
    for await (const token of model.generate(prompt, { maxNewTokens: settings.newTokens, temperature: 0 })) {
      const now = performance.now();
      if (tokens.length === 0) prefillMs = now - start;
      else intervals.push(now - last);
      last = now;
      tokens.push(token);
    }
    const inOrder = intervals.slice(settings.warmupTokens);
    const timed = [...inOrder].sort((a, b) => a - b);
    const median = quantile(timed, 0.5);
    const timing = await stepTiming(model, prompt.length, tokens, settings);
    const deviceMs = timing.profile?.stepDeviceMs;
    // Teacher-forced logits of this run's own tokens: their margins, and the quantized side of the quality.
    const own = await sequenceLogits(model, [...prompt, ...tokens.slice(0, -1)], tokens.length);
    const margins = topMargins(own, tokens.length, model.config.vocabSize);
    const quality = model.quantization
      ? await quantizationQuality(model, model.quantization, own, dir, prompt, tokens, settings)
      : undefined;
    return {
      margins,
      ...(quality ? { quality } : {}),
      loadMs,
      ...(copyGbps === undefined ? {} : { copyGbps }),
      ...(deviceMs === undefined ? {} : { deviceMsPerStep: deviceMs }),
      // Not ms/token − device ms/step: a pipelined token overlaps the next step's setup, so that difference can be negative.
      ...(deviceMs === undefined || !timing.hostPhases
        ? {}
        : { hostMsPerToken: timing.hostPhases.enqueueUs / 1000 }),
      ...timing,
      logits,
      run: {
        msPerToken: median,
        p10Ms: quantile(timed, 0.1),
        p90Ms: quantile(timed, 0.9),
        intervalsMs: inOrder,
        tokensPerSecond: 1000 / median,
        prefillMs,
        tokens,
      },
    };
  } finally {
    model.dispose();
  }
}

/**
 * Teacher-forced logits [rows, vocab] of the last `rows` tokens of `sequence`,
 * from the start of the context: the positions after the prompt's last are
 * all a check reads (a long prompt's every row would not fit).
 */
async function sequenceLogits(
  model: LlamaModel,
  sequence: readonly number[],
  rows: number,
): Promise<Float32Array> {
  model.reset();
  using logits = model.prefill(sequence, { lastRows: rows });
  return (await logits.read()) as Float32Array;
}

/** Top logit less the second in each of the `count` rows of logits [count, vocab]. */
function topMargins(logits: Float32Array, count: number, vocab: number): number[] {
  return Array.from({ length: count }, (_, i) => topMargin(logits.subarray(i * vocab, (i + 1) * vocab)));
}

/** The largest value less the second largest. */
export function topMargin(row: Float32Array): number {
  let first = Number.NEGATIVE_INFINITY;
  let second = Number.NEGATIVE_INFINITY;
  for (const v of row) {
    if (v > first) {
      second = first;
      first = v;
    } else if (v > second) second = v;
  }
  return first - second;
}

function argmaxOf(row: Float32Array): number {
  let best = 0;
  for (let i = 1; i < row.length; i++) if (row[i]! > row[best]!) best = i;
  return best;
}

/**
 * The quantized model (`model`, which decoded `tokens`) against the same
 * checkpoint loaded in f32 on the same backend: see QuantizationQuality.
 * Both prefill the prompt and the generated tokens (but the last), so the
 * quantized model's prefill path is measured too.
 */
async function quantizationQuality(
  model: LlamaModel,
  weights: LlamaQuantizationReport,
  /** The quantized model's teacher-forced logits of the prompt and `tokens` but the last, from the prompt's last row on. */
  quantized: Float32Array,
  dir: string,
  prompt: readonly number[],
  tokens: readonly number[],
  settings: Pick<DecodeSettings, 'newTokens' | 'kvDtype' | 'maxSequence'>,
): Promise<QuantizationQuality> {
  const sequence = [...prompt, ...tokens.slice(0, -1)];
  using dense = await LlamaModel.load(model.backend, dir, {
    maxSequence: cacheRows(settings, prompt.length),
    weightDtype: 'f32',
    kvCacheDtype: settings.kvDtype,
  });
  const denseTokens: number[] = [];
  for await (const token of dense.generate(prompt, { maxNewTokens: tokens.length, temperature: 0 }))
    denseTokens.push(token);
  const first = prompt.length - 1;
  const positions = sequence.length - first;
  const reference = await sequenceLogits(dense, sequence, positions);
  const vocab = dense.config.vocabSize;
  let agree = 0;
  let maxError = 0;
  let sumError = 0;
  for (let p = 0; p < positions; p++) {
    const q = quantized.subarray(p * vocab, (p + 1) * vocab);
    const d = reference.subarray(p * vocab, (p + 1) * vocab);
    if (argmaxOf(q) === argmaxOf(d)) agree++;
    for (let i = 0; i < vocab; i++) {
      const e = Math.abs(q[i]! - d[i]!);
      maxError = Math.max(maxError, e);
      sumError += e;
    }
  }
  return {
    weights,
    firstDisagreement: firstDisagreement(tokens, denseTokens),
    positions,
    top1Agreement: agree / positions,
    logitsMaxError: maxError,
    logitsMeanError: sumError / (positions * vocab),
  };
}

/**
 * The decode step at a row in the middle of the generated ones (the length
 * the timed tokens attended over): its device time and, with
 * `settings.profile`, each kernel group's; then the host phases of replayed
 * tokens at that row. A failure here is reported beside the decode run,
 * which stands.
 */
async function stepTiming(
  model: LlamaModel,
  promptLength: number,
  tokens: readonly number[],
  settings: Pick<DecodeSettings, 'newTokens' | 'profile' | 'profileRepetitions' | 'hostTokens'>,
): Promise<Pick<DecodeBackendResult, 'profile' | 'hostPhases' | 'profileError'>> {
  const { backend } = model;
  const position = promptLength + Math.floor((settings.newTokens - 1) / 2);
  const { profile, phases, error } = await stepDetail(
    () => {
      backend.write(model.tokenInput, Int32Array.of(tokens[tokens.length - 1] ?? 0));
      backend.write(model.positionInput, Int32Array.of(position));
      backend.write(model.lengthInput, Int32Array.of(position + 1));
      return profileStep(backend, (runner, made) => model.recordStep(runner, made), {
        kernels: settings.profile,
        repetitions: settings.profileRepetitions,
        deviceValues: new Map([
          [model.positionInput, position],
          [model.lengthInput, position + 1],
        ]),
      });
    },
    () => measureHostPhases(model, { position, tokens: settings.hostTokens }),
  );
  return {
    ...(profile ? { profile } : {}),
    ...(phases ? { hostPhases: phases } : {}),
    ...(error ? { profileError: error } : {}),
  };
}

/** Index of the first token where two runs part, or -1 when they agree over their common length. */
export function firstDisagreement(a: readonly number[], b: readonly number[]): number {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) if (a[i] !== b[i]) return i;
  return a.length === b.length ? -1 : n;
}

export function maxAbsDiff(a: Float32Array, b: Float32Array): number {
  if (a.length !== b.length) return Number.POSITIVE_INFINITY;
  let max = 0;
  for (let i = 0; i < a.length; i++) max = Math.max(max, Math.abs(a[i]! - b[i]!));
  return max;
}

export interface DecodeReport {
  readonly schema: 'rayo-decode-bench/1';
  readonly createdAt: string;
  readonly settings: DecodeSettings;
  readonly hfConfig: Record<string, unknown>;
  /**
   * What one decode step reads of the weights at least: the checkpoint's
   * bytes in `settings.dtype`, with --quant the quantized projections'
   * codes, scales and zero points in place of theirs.
   */
  readonly weightBytes: number;
  /** With --quant: the checkpoint's bytes in `settings.dtype`, before quantizing. */
  readonly checkpointBytes?: number;
  /**
   * What one decode step reads of the KV cache at the middle of the timed
   * tokens: keys and values of every layer's kv heads over the rows attended.
   */
  readonly cacheBytes: number;
  /** The highest copy bandwidth measured (GB/s): the limit is the weights' and the cache's bytes over it. */
  readonly bandwidthGbps?: number;
  readonly limitMs?: number;
  readonly backends: readonly Omit<DecodeBackendResult, 'logits' | 'margins'>[];
  readonly torch: TorchDecodeEntry;
  /**
   * Every run against the reference: PyTorch's `reference` run where there is
   * one (half weights or cache: rayo's arithmetic in PyTorch), else the first
   * run that finished. Where tokens part (-1: never), the logits' max |Δ|, and
   * whether a disagreement fails the run (`gate`): PyTorch's own half runs
   * round activations to half and are compared for information only.
   */
  readonly agreement: readonly DecodeAgreement[];
  /** With --prefill: time to first token per prompt length, rayo and PyTorch. */
  readonly prefill?: PrefillReport;
}

export interface DecodeAgreement {
  readonly run: string;
  readonly reference: string;
  readonly firstDisagreement: number;
  readonly logitsMaxDiff?: number;
  /**
   * Where the runs part at a near tie: the top two logits there lie closer
   * (`margin`) than the two runs' prompt logits differ (`logitsMaxDiff`,
   * itself at most 5% of the logits' size), so either token is the model's;
   * such a parting does not fail the run. `of` names the run whose margin it
   * is: the reference's where it has them, else the compared run's (PyTorch's
   * reference records none). Before they part both saw the same tokens, so
   * either run's margin there is of the same context.
   */
  readonly nearTie?: { readonly margin: number; readonly of: string };
  readonly gate: boolean;
}

/** The most two runs' prompt logits may differ, as a share of their size, for a parting to count as a near tie. */
const NEAR_TIE_SHARE = 0.05;

function maxAbs(values: Float32Array): number {
  let most = 0;
  for (const v of values) most = Math.max(most, Math.abs(v));
  return most;
}

/** PyTorch's run of rayo's arithmetic on half weights or caches (its tokens are the ones to match). */
export const TORCH_REFERENCE_RUN = 'torch-reference';

/**
 * Compares every run with the reference (see `DecodeReport.agreement`):
 * PyTorch's reference run when present, else the first run.
 */
export function decodeAgreement(
  runs: readonly {
    name: string;
    tokens: readonly number[];
    logits?: Float32Array;
    margins?: readonly number[];
  }[],
): DecodeAgreement[] {
  const reference = runs.find((r) => r.name === TORCH_REFERENCE_RUN) ?? runs[0];
  if (!reference) return [];
  return runs
    .filter((r) => r !== reference)
    .map((r) => {
      const parts = firstDisagreement(r.tokens, reference.tokens);
      // PyTorch writes one logits file (its first run's): never compared with itself.
      const logitsMaxDiff =
        r.logits && reference.logits && !(r.name.startsWith('torch-') && reference.name.startsWith('torch-'))
          ? maxAbsDiff(r.logits, reference.logits)
          : undefined;
      // A near tie: the margin where they part is within the runs' difference, and that
      // difference is rounding's (at most 5% of the logits' size), not a fault's.
      const marginOf = reference.margins ? reference : r;
      const margin = parts >= 0 ? marginOf.margins?.[parts] : undefined;
      const nearTie =
        margin !== undefined &&
        logitsMaxDiff !== undefined &&
        margin <= logitsMaxDiff &&
        logitsMaxDiff <= NEAR_TIE_SHARE * maxAbs(reference.logits!);
      return {
        run: r.name,
        reference: reference.name,
        firstDisagreement: parts,
        ...(logitsMaxDiff === undefined ? {} : { logitsMaxDiff }),
        ...(nearTie ? { nearTie: { margin, of: marginOf.name } } : {}),
        gate: !(reference.name === TORCH_REFERENCE_RUN && r.name.startsWith('torch-')),
      };
    });
}

/** Runs the benchmark: weights, every backend, the baseline; writes report.json and report.md. */
export async function decodeBench(
  settings: DecodeSettings,
  log: (line: string) => void = (line) => {
    process.stderr.write(`${line}\n`);
  },
): Promise<DecodeReport> {
  const hfConfig = DECODE_CONFIGS[settings.config];
  if (!hfConfig)
    throw new Error(`unknown config '${settings.config}' (known: ${Object.keys(DECODE_CONFIGS).join(', ')})`);
  // One folder per dtype (the f32 one keeps its old name, so that a checkpoint on disk is reused).
  const dir = resolve(
    settings.weights,
    settings.dtype === 'f32' ? settings.config : `${settings.config}-${settings.dtype}`,
  );
  await mkdir(dir, { recursive: true });
  await mkdir(settings.out, { recursive: true });
  log(`weights (${settings.dtype}): ${dir}`);
  const weightBytes = await writeSeededLlama(dir, hfConfig, settings.seed, settings.dtype);
  const prompt = decodePrompt(hfConfig.vocab_size as number, settings.promptTokens, settings.seed);
  const results: DecodeBackendResult[] = [];
  for (const status of settings.prefillOnly ? [] : await probeBackends(settings.backends)) {
    if (!status.available) {
      results.push({
        backend: status.name,
        device: '',
        status: 'unavailable',
        reason: status.reason ?? 'unavailable',
      });
      continue;
    }
    const backend = await createBackendFromEnvironment(status.name);
    const options = await environmentOptionsNote(status.name);
    const device = options ? `${backend.info.device}; ${options}` : backend.info.device;
    try {
      log(
        `${status.name}: decoding ${settings.newTokens} tokens after ${prompt.length}${options ? ` (${options})` : ''}`,
      );
      const r = await decodeOnBackend(backend, dir, prompt, settings);
      results.push({ backend: status.name, device, status: 'ok', ...r });
      log(`${status.name}: ${r.run!.msPerToken.toFixed(3)} ms/token`);
    } catch (error) {
      const reason = error instanceof Error ? error.message : String(error);
      results.push({ backend: status.name, device, status: 'error', reason });
      log(`${status.name}: error: ${reason}`);
    } finally {
      backend.dispose();
    }
  }
  const prefill = settings.prefillLengths
    ? await prefillBench({ ...settings, prefillLengths: settings.prefillLengths }, dir, hfConfig, log)
    : undefined;
  const torch: TorchDecodeOutcome =
    settings.baseline === 'torch' && !settings.prefillOnly
      ? await runTorchDecode(dir, prompt, settings)
      : {
          status: 'unavailable',
          reason: settings.prefillOnly ? 'prefill only' : 'not requested (--baseline torch runs it)',
        };

  const runs: Parameters<typeof decodeAgreement>[0][number][] = [];
  for (const r of results)
    if (r.run)
      runs.push({
        name: r.backend,
        tokens: r.run.tokens,
        ...(r.logits ? { logits: r.logits } : {}),
        ...(r.margins ? { margins: r.margins } : {}),
      });
  // With --quant PyTorch decodes the dense model: a timing reference, not the same model to agree with.
  if (torch.status === 'ok' && settings.quant === 'none') {
    for (const [method, r] of Object.entries(torch.output.results)) {
      if ('tokens' in r)
        runs.push({
          name: `torch-${method}`,
          tokens: r.tokens,
          ...(torch.logits ? { logits: torch.logits } : {}),
        });
    }
  }
  const agreement = decodeAgreement(runs);
  const bandwidths = results.flatMap((r) => (r.copyGbps === undefined ? [] : [r.copyGbps]));
  const bandwidthGbps = bandwidths.length ? Math.max(...bandwidths) : undefined;
  // The same checkpoint quantizes to the same bytes on every backend.
  const quantized = results.find((r) => r.quality)?.quality?.weights;
  const readBytes = quantized ? weightBytes - quantized.denseBytes + quantized.quantizedBytes : weightBytes;
  const cacheBytes = cacheBytesPerStep(hfConfig, settings);
  const report: DecodeReport = {
    schema: 'rayo-decode-bench/1',
    createdAt: new Date().toISOString(),
    settings,
    hfConfig,
    weightBytes: readBytes,
    ...(quantized ? { checkpointBytes: weightBytes } : {}),
    cacheBytes,
    ...(bandwidthGbps === undefined
      ? {}
      : { bandwidthGbps, limitMs: ((readBytes + cacheBytes) / (bandwidthGbps * 1e9)) * 1e3 }),
    backends: results.map(({ logits: _logits, margins: _margins, ...rest }) => rest),
    torch: torch.status === 'ok' ? { status: 'ok', output: torch.output } : torch,
    agreement,
    ...(prefill ? { prefill } : {}),
  };
  await writeFile(join(settings.out, 'report.json'), `${JSON.stringify(report, null, 2)}\n`);
  await writeFile(join(settings.out, 'report.md'), decodeMarkdown(report));
  return report;
}

function fmt(x: number | undefined, digits = 3): string {
  return x === undefined || !Number.isFinite(x) ? '—' : String(Number(x.toPrecision(digits)));
}

/** The device, and why a backend that decoded has no device/host split. */
function clockNote(b: Omit<DecodeBackendResult, 'logits'>): string {
  if (b.deviceMsPerStep !== undefined) return b.device;
  if (b.profile && !b.profile.deviceClock) return `${b.device} (no device clock: no device/host split)`;
  return b.profileError ? `${b.device} (${b.profileError})` : b.device;
}

export function textTable(header: readonly string[], rows: readonly string[][]): string[] {
  const all = [header, ...rows];
  const widths = header.map((_, i) => Math.max(...all.map((r) => r[i]!.length)));
  const line = (r: readonly string[]) =>
    r
      .map((c, i) => c.padEnd(widths[i]!))
      .join('  ')
      .trimEnd();
  return [line(header), widths.map((w) => '-'.repeat(w)).join('  '), ...rows.map(line)];
}

function markdownTable(header: readonly string[], rows: readonly string[][]): string[] {
  const cell = (c: string) => c.replaceAll('|', '\\|');
  return [
    `| ${header.join(' | ')} |`,
    `| ${header.map(() => '---').join(' | ')} |`,
    ...rows.map((r) => `| ${r.map(cell).join(' | ')} |`),
  ];
}

const PHASES_HEADER = ['phase', 'µs (median)'];

/** The host phases of one replayed token, as rows. */
function phaseRows(p: HostPhases): string[][] {
  return [
    ['submit, until the device is done (holds the step)', fmt(p.submitUs)],
    ['  of which the submit call: encode and queue on the host (no writes)', fmt(p.enqueueUs)],
    ['read the chosen token (i32)', fmt(p.readTokenUs)],
    ['whole token', fmt(p.tokenUs)],
    [`idle device: read the logits (${fmt(p.logitsBytes / 1024)} KiB)`, fmt(p.idleReadLogitsUs)],
    ['idle device: read one i32', fmt(p.idleReadScalarUs)],
    ['argmax of the logits on the host', fmt(p.hostArgmaxUs)],
    ['idle device: sync', fmt(p.idleSyncUs)],
  ];
}

/** Per backend: the kernel breakdown and the host phases, as text lines (`md` for markdown tables). */
function backendDetails(report: DecodeReport, md: boolean): string[] {
  const table = md ? markdownTable : textTable;
  const out: string[] = [];
  for (const b of report.backends) {
    if (b.status !== 'ok') continue;
    if (b.profile) {
      out.push(
        '',
        md
          ? `### ${b.backend}: the decode step, kernel by kernel`
          : `${b.backend}: the decode step, kernel by kernel`,
        '',
      );
      out.push(...table(PROFILE_HEADER, profileRows(b.profile)), '', profileTotals(b.profile));
    }
    if (b.hostPhases) {
      const p = b.hostPhases;
      out.push(
        '',
        md
          ? `### ${b.backend}: host phases of a replayed token`
          : `${b.backend}: host phases of a replayed token`,
        '',
      );
      out.push(...table(PHASES_HEADER, phaseRows(p)));
      if (b.deviceMsPerStep !== undefined) {
        out.push(
          '',
          `submit − device step = ${fmt(p.submitUs - b.deviceMsPerStep * 1e3)} µs of launch and wait; ` +
            `host per token here ${fmt(p.tokenUs - b.deviceMsPerStep * 1e3)} µs (whole token − device step)`,
        );
      }
      out.push(
        '',
        `reading the logits instead of one i32 costs ${fmt(p.idleReadLogitsUs - p.idleReadScalarUs)} µs ` +
          'more with the device idle (the readback a token chosen on the device would save)',
      );
    }
    if (b.profileError) out.push('', `${b.backend}: ${b.profileError}`);
  }
  return out;
}

/** The rows of the summary: each rayo backend and each PyTorch way, with ms/token and the limit. */
export function decodeRows(report: DecodeReport): string[][] {
  const limit = report.limitMs;
  const row = (
    name: string,
    run: { msPerToken: number; tokensPerSecond: number; prefillMs: number } | undefined,
    note: string,
    split?: { deviceMsPerStep?: number; hostMsPerToken?: number },
  ) =>
    run
      ? [
          name,
          fmt(run.msPerToken),
          fmt(split?.deviceMsPerStep),
          fmt(split?.hostMsPerToken),
          fmt(run.tokensPerSecond, 4),
          fmt(run.prefillMs),
          limit ? `${fmt((100 * limit) / run.msPerToken, 2)}%` : '—',
          note,
        ]
      : [name, '—', '—', '—', '—', '—', '—', note];
  const rows = report.backends.map((b) =>
    row(b.backend, b.run, b.status === 'ok' ? clockNote(b) : `${b.status}: ${b.reason}`, b),
  );
  if (report.torch.status === 'ok') {
    for (const [method, r] of Object.entries(report.torch.output.results)) {
      rows.push(
        'error' in r
          ? row(`torch ${method}`, undefined, r.error)
          : row(`torch ${method}`, r, report.torch.output.device ?? ''),
      );
    }
  } else rows.push(row('torch', undefined, report.torch.reason));
  return rows;
}

const HEADER = [
  'run',
  'ms/token',
  'device ms/step',
  'host ms/token',
  'tokens/s',
  'prefill ms',
  'of limit',
  'device / note',
];

export function decodeSummary(report: DecodeReport): string {
  const out = textTable(HEADER, decodeRows(report));
  out.push(
    '',
    `${report.settings.config}: ${fmt(report.weightBytes / 1e9)} GB of ${weightsNote(report.settings)} and ${fmt(report.cacheBytes / 1e9)} GB of cache a step; limit ${fmt(report.limitMs)} ms/token at ${fmt(report.bandwidthGbps, 4)} GB/s`,
  );
  for (const a of report.agreement) {
    out.push(
      `${a.run} vs ${a.reference}: ${a.firstDisagreement < 0 ? 'same tokens' : `tokens part at ${a.firstDisagreement}`}` +
        (a.logitsMaxDiff === undefined ? '' : `, prompt logits max |Δ| ${fmt(a.logitsMaxDiff, 2)}`) +
        (a.nearTie
          ? `, a near tie: ${a.nearTie.of}'s top two logits there ${fmt(a.nearTie.margin, 2)} apart, within the runs' difference`
          : '') +
        (a.gate ? '' : ' (for information: PyTorch rounds activations to half)'),
    );
  }
  out.push(...qualityLines(report));
  out.push('', SPLIT_NOTE, ...backendDetails(report, false));
  if (report.prefill) out.push('', ...prefillLines(report.prefill));
  return `${out.join('\n')}\n`;
}

/** With --quant, per backend: the weights' error and the quantized model against the same model in f32. */
function qualityLines(report: DecodeReport): string[] {
  return report.backends.flatMap((b) => {
    const q = b.quality;
    if (!q) return [];
    const w = q.weights;
    return [
      `${b.backend} ${w.format}: ${report.settings.quantHead ? 'projections and head' : 'projections'} ${fmt(w.quantizedBytes / 1e9)} GB instead of ${fmt(w.denseBytes / 1e9)} GB, ` +
        `quantized on the ${w.path} in ${fmt(w.milliseconds / 1000, 3)} s` +
        (w.maxAbsError === undefined
          ? '; '
          : ` (weights max |Δ| ${fmt(w.maxAbsError, 2)}, RMS relative ${fmt(w.rmsRelativeError!, 2)}); `) +
        `against f32: ` +
        `${q.firstDisagreement < 0 ? 'the same greedy tokens' : `greedy tokens part at ${q.firstDisagreement}`}, ` +
        `top-1 agreement ${fmt(100 * q.top1Agreement, 4)}% over ${q.positions} positions (teacher-forced), ` +
        `logits max |Δ| ${fmt(q.logitsMaxError, 2)}, mean |Δ| ${fmt(q.logitsMeanError, 2)}`,
    ];
  });
}

/** The weights' and the cache's dtypes, as the report states them. */
/** Bytes of K and V every layer reads at the middle of the timed tokens (its position + 1 rows). */
export function cacheBytesPerStep(
  hf: Record<string, unknown>,
  s: Pick<DecodeSettings, 'kvDtype' | 'promptTokens' | 'newTokens'>,
): number {
  const heads = Number(hf.num_attention_heads);
  const headDim = Number(hf.head_dim ?? Number(hf.hidden_size) / heads);
  const kvHeads = Number(hf.num_key_value_heads ?? heads);
  const rows = s.promptTokens + Math.floor((s.newTokens - 1) / 2) + 1;
  const bytes = s.kvDtype === 'f32' ? 4 : 2;
  return 2 * Number(hf.num_hidden_layers) * kvHeads * headDim * rows * bytes;
}

function weightsNote(s: Pick<DecodeSettings, 'dtype' | 'kvDtype' | 'quant' | 'quantHead'>): string {
  const projections =
    s.quant === 'none' ? '' : ` with ${s.quant} projections${s.quantHead ? ' and head' : ''}`;
  return `${s.dtype} weights${projections}, ${s.kvDtype} KV cache`;
}

const SPLIT_NOTE =
  'device ms/step: the recorded decode step alone on the device (one CUDA graph between events, ' +
  'one command buffer between timestamps), median of 5; host ms/token: the per-token writes and the submit call of a ' +
  'replayed token (the host phases below), the host work that the device step hides.';

/** KV cache rows of rayo's models: --max-sequence, else the prompt and the new tokens. */
function cacheRows(
  settings: Pick<DecodeSettings, 'newTokens' | 'maxSequence'>,
  promptTokens: number,
): number {
  return settings.maxSequence ?? promptTokens + settings.newTokens;
}

export function decodeMarkdown(report: DecodeReport): string {
  const s = report.settings;
  const table = markdownTable(HEADER, decodeRows(report));
  const position = s.promptTokens + Math.floor((s.newTokens - 1) / 2);
  return `${[
    '# rayo decode-bench',
    '',
    `${report.createdAt}. Model \`${s.config}\` (${fmt(report.weightBytes / 1e9)} GB of ${weightsNote(s)}, seed ${s.seed}), ` +
      `greedy decoding of ${s.newTokens} tokens after a prompt of ${s.promptTokens}` +
      `${s.maxSequence === undefined ? '' : ` in a KV cache of ${s.maxSequence} rows`}; ms/token is the median ` +
      `interval between tokens after ${s.warmupTokens} untimed ones, each token read back to the host. ` +
      `The limit is the bytes a step reads at least, the weights' and the KV cache's at the middle of the timed tokens ` +
      `(${fmt(report.cacheBytes / 1e9)} GB), over the best copy bandwidth measured (${fmt(report.bandwidthGbps, 4)} GB/s): ` +
      `${fmt(report.limitMs)} ms/token.`,
    '',
    ...table,
    '',
    SPLIT_NOTE,
    '',
    '## Where the time goes',
    '',
    `The step is profiled at cache row ${position} (attending over ${position + 1} rows, the middle of the timed tokens). ` +
      (s.profile
        ? `Each group of identical kernel calls (same kernel, input shapes, attributes) runs alone, back to back ` +
          `${s.profileRepetitions} times on its own operands, median of 3; µs/call divides that out. A group whose ` +
          'operands fit in the device cache (the KV cache of a layer, the small vectors) finds them there on the ' +
          'repetitions, which the step does not always. µs in step is the step replayed from its recorded calls ' +
          'less the same without the group (median of 3 each): cold operands and the gaps the group adds count; ' +
          "a group below the step's jitter can come out near zero or negative. "
        : 'Kernels not timed one by one (--profile times them). ') +
      `Bytes are the spec's \`cost()\` (what a perfect kernel moves) at the attended length. ` +
      `The host phases time ${s.hostTokens} replays of the recorded step at that row (and the next: ` +
      'each replay ends with the argmax into the next token and moves the position by one on the device, ' +
      'as `generate` does) with performance.now around each phase, outside `generate`.',
    ...backendDetails(report, true),
    '',
    '## Agreement',
    '',
    ...qualityLines(report).map((line) => `- ${line}`),
    ...(report.agreement.length
      ? report.agreement.map(
          (a) =>
            `- ${a.run} vs ${a.reference}: ${a.firstDisagreement < 0 ? 'the same tokens' : `tokens part at index ${a.firstDisagreement}`}` +
            (a.logitsMaxDiff === undefined
              ? ''
              : `; the prompt's logits differ by at most ${fmt(a.logitsMaxDiff, 2)}`) +
            (a.gate ? '' : ' (for information: PyTorch rounds activations to half)'),
        )
      : ['- only one run']),
    ...(report.prefill ? ['', ...prefillLines(report.prefill)] : []),
  ].join('\n')}\n`;
}

export const DECODE_USAGE = `Usage: decode-bench [options]

Decodes a Llama-shaped model with seeded weights greedily on rayo backends
and, with --baseline torch, in PyTorch (eager and as one CUDA graph per step)
from the same checkpoint, and reports ms per token against the bandwidth limit.

  --config NAME     ${Object.keys(DECODE_CONFIGS).join(', ')} (default llama-d2048-hd64)
  --dtype D         f32, f16 or bf16: the checkpoint and the model's matrix weights and
                    embedding, in rayo and in PyTorch (default f32)
  --kv-dtype D      f32, f16 or bf16: the KV cache (default: --dtype, as LlamaModel keeps a half
                    model's cache)
  --quant F         q8, q4g32, q4g128, q8g32, q8g16, q4g32a, q8g32a, q4k, q6k, q5k, q5g32,
                    q5g32a or none: quantize the projections on load (rayo only; q8g32, q4k,
                    q5k, q6k, q5g32 and q5g32a are the formats of GGUF's Q8_0, Q4_K, Q5_K,
                    Q6_K, Q5_0 and Q5_1, q4k, q5k, q6k, q5g32 and q5g32a at 4.5, 5.5,
                    6.5625, 5.5 and 6 bits per weight);
                    reports the bytes read and the quantized model against the same model
                    in f32 (greedy tokens, top-1 agreement, logit error) (default none)
  --quant-head      with --quant: quantize the LM head in the same format too
  --quant-on WHERE  with --quant: device or host (default device where the backend can);
                    the report gives the time quantizing took and where it ran
  --backends LIST   rayo backends (default cuda,wgpu)
  --prompt N        prompt tokens (default 1024)
  --new N           tokens to generate (default 128)
  --max-sequence N  KV cache rows of rayo's models, as the CLI's --max-sequence (default: the
                    prompt and the new tokens; at least that)
  --warmup N        untimed tokens at the start (default 8)
  --baseline NAME   torch or none (default none)
  --torch-device D  the PyTorch device (default cuda; cpu only checks the script)
  --seed N          weights and prompt (default 0)
  --weights DIR     where the checkpoints are written once and reused (default decode-weights)
  --out DIR         report folder (default decode-results)
  --profile         time each group of identical kernel calls of the decode step
                    (the whole step's device time and the host phases are always measured);
                    with --prefill, also one prefill chunk on the device, kernel by kernel
  --profile-reps N  back-to-back repetitions of a kernel group per timing (default 10)
  --host-tokens N   replayed tokens whose host phases are timed (default 32)
  --prefill LIST    also time the first token after prompts of these lengths (comma-separated,
                    or all: ${PREFILL_LENGTHS.join(',')}), in rayo and with --baseline torch in PyTorch
                    (SDPA flash, eager and torch.compile), beside the bf16 tensor-core limit
  --prefill-only    the prefill measurement alone, no decoding (implies --prefill)
  --prefill-reps N  timed runs of each prompt length, median reported (default 3)
  --prefill-precision P  f32, tf32 or bf16: how f32 weights multiply a prompt (default f32)
  --prefill-chunk N      prompt tokens per forward pass (the model's prefillChunk; default 2048)`;

export function parseDecodeArgs(argv: readonly string[]): DecodeSettings {
  const { values } = parseArgs({
    args: [...argv],
    options: {
      config: { type: 'string', default: 'llama-d2048-hd64' },
      dtype: { type: 'string', default: 'f32' },
      'kv-dtype': { type: 'string' },
      quant: { type: 'string', default: 'none' },
      'quant-head': { type: 'boolean', default: false },
      'quant-on': { type: 'string' },
      backends: { type: 'string', default: 'cuda,wgpu' },
      prompt: { type: 'string', default: '1024' },
      new: { type: 'string', default: '128' },
      warmup: { type: 'string', default: '8' },
      baseline: { type: 'string', default: 'none' },
      'torch-device': { type: 'string', default: 'cuda' },
      seed: { type: 'string', default: '0' },
      weights: { type: 'string', default: 'decode-weights' },
      out: { type: 'string', default: 'decode-results' },
      profile: { type: 'boolean', default: false },
      'profile-reps': { type: 'string', default: '10' },
      'host-tokens': { type: 'string', default: '32' },
      'max-sequence': { type: 'string' },
      prefill: { type: 'string' },
      'prefill-only': { type: 'boolean', default: false },
      'prefill-reps': { type: 'string', default: '3' },
      'prefill-precision': { type: 'string' },
      'prefill-chunk': { type: 'string' },
    },
  });
  const int = (name: string, text: string, min: number) => {
    const v = Number(text);
    if (!Number.isInteger(v) || v < min)
      throw new Error(`--${name} must be an integer >= ${min}, got ${text}`);
    return v;
  };
  const dtype = (name: string, text: string): LlamaWeightDType => {
    if (text !== 'f32' && text !== 'f16' && text !== 'bf16')
      throw new Error(`--${name} must be f32, f16 or bf16, got ${text}`);
    return text;
  };
  const quant = values.quant;
  if (quant !== 'none' && !isQuantFormat(quant))
    throw new Error(`--quant must be ${QUANT_FORMATS.join(', ')} or none, got ${quant}`);
  if (values['quant-head'] && quant === 'none') throw new Error('--quant-head needs --quant');
  const quantOn = values['quant-on'];
  if (quantOn !== undefined && quantOn !== 'device' && quantOn !== 'host')
    throw new Error(`--quant-on must be device or host, got ${quantOn}`);
  if (quantOn !== undefined && quant === 'none') throw new Error('--quant-on needs --quant');
  if (values.baseline !== 'torch' && values.baseline !== 'none')
    throw new Error(`--baseline must be torch or none, got ${values.baseline}`);
  if (!DECODE_CONFIGS[values.config])
    throw new Error(`unknown --config '${values.config}' (known: ${Object.keys(DECODE_CONFIGS).join(', ')})`);
  const newTokens = int('new', values.new, 2);
  const promptTokens = int('prompt', values.prompt, 1);
  const maxSequence =
    values['max-sequence'] === undefined
      ? undefined
      : int('max-sequence', values['max-sequence'], promptTokens + newTokens);
  const warmupTokens = int('warmup', values.warmup, 0);
  if (warmupTokens >= newTokens - 1)
    throw new Error(`--warmup must leave tokens to time: below ${newTokens - 1}, got ${warmupTokens}`);
  const prefillLengths =
    values.prefill === undefined
      ? values['prefill-only']
        ? [...PREFILL_LENGTHS]
        : undefined
      : values.prefill === 'all'
        ? [...PREFILL_LENGTHS]
        : values.prefill.split(',').map((n) => int('prefill', n, 2));
  const prefillPrecision = values['prefill-precision'];
  if (prefillPrecision !== undefined && !['f32', 'tf32', 'bf16'].includes(prefillPrecision))
    throw new Error(`--prefill-precision must be f32, tf32 or bf16, got ${prefillPrecision}`);
  return {
    ...(prefillLengths
      ? { prefillLengths, prefillRepeats: int('prefill-reps', values['prefill-reps'], 1) }
      : {}),
    ...(values['prefill-only'] ? { prefillOnly: true } : {}),
    ...(prefillPrecision ? { prefillPrecision: prefillPrecision as LlamaPrefillPrecision } : {}),
    ...(values['prefill-chunk'] !== undefined
      ? { prefillChunk: int('prefill-chunk', values['prefill-chunk'], 1) }
      : {}),
    config: values.config,
    dtype: dtype('dtype', values.dtype),
    kvDtype: dtype('kv-dtype', values['kv-dtype'] ?? values.dtype),
    backends: values.backends.split(',').filter(Boolean),
    promptTokens,
    newTokens,
    ...(maxSequence === undefined ? {} : { maxSequence }),
    warmupTokens,
    seed: int('seed', values.seed, 0),
    baseline: values.baseline,
    torchDevice: values['torch-device'],
    weights: values.weights,
    out: values.out,
    profile: values.profile,
    profileRepetitions: int('profile-reps', values['profile-reps'], 1),
    hostTokens: int('host-tokens', values['host-tokens'], 1),
    quant,
    ...(values['quant-head'] ? { quantHead: true } : {}),
    ...(quantOn ? { quantOn } : {}),
  };
}
