import { mkdir, writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { type Backend, copy, createBackend, probeBackends } from '@rayo/core';
import { LlamaModel } from '../models/llama/model.js';
import { Rng } from '../random.js';
import { runTorchDecode, type TorchDecodeEntry, type TorchDecodeOutcome } from '../torchDecodeBaseline.js';
import { writeSeededLlama } from './seededLlama.js';

/**
 * The decode benchmark: a Llama-shaped fp32 model with seeded weights,
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

/** Llama-shaped configurations (Hugging Face config.json fields). */
export const DECODE_CONFIGS: Readonly<Record<string, Record<string, unknown>>> = {
  // 32 query / 8 kv heads of 64: 1.97 GB of fp32 weights.
  'llama-d2048-hd64': { ...LLAMA_D2048, num_attention_heads: 32, num_key_value_heads: 8 },
  // The same weight bytes with heads of 128 (16 query / 4 kv heads).
  'llama-d2048-hd128': { ...LLAMA_D2048, num_attention_heads: 16, num_key_value_heads: 4 },
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

export interface DecodeRun {
  /** Milliseconds between consecutive tokens (the first, from the prompt, excluded). */
  readonly msPerToken: number;
  readonly p10Ms: number;
  readonly p90Ms: number;
  readonly tokensPerSecond: number;
  readonly prefillMs: number;
  readonly tokens: readonly number[];
}

export interface DecodeBackendResult {
  readonly backend: string;
  readonly device: string;
  readonly status: 'ok' | 'error' | 'unavailable';
  readonly reason?: string;
  readonly loadMs?: number;
  /** The backend's device copy of 256 MiB, in GB/s (reads + writes). */
  readonly copyGbps?: number;
  readonly run?: DecodeRun;
  /** The prompt's last-position logits (compared across runs, not written to the report). */
  readonly logits?: Float32Array;
}

export interface DecodeSettings {
  readonly config: string;
  readonly backends: readonly string[];
  readonly promptTokens: number;
  readonly newTokens: number;
  /** Tokens not timed at the start of each run. */
  readonly warmupTokens: number;
  readonly seed: number;
  readonly baseline: 'torch' | 'none';
  /** The PyTorch device (cuda; cpu only checks the script). */
  readonly torchDevice: string;
  readonly weights: string;
  readonly out: string;
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
  settings: Pick<DecodeSettings, 'newTokens' | 'warmupTokens'>,
): Promise<Omit<DecodeBackendResult, 'backend' | 'device' | 'status'>> {
  const copyGbps = await copyBandwidth(backend);
  const loadStart = performance.now();
  const model = await LlamaModel.load(backend, dir, { maxSequence: prompt.length + settings.newTokens });
  await backend.sync();
  const loadMs = performance.now() - loadStart;
  try {
    const logitsTensor = model.prefill(prompt);
    const all = (await logitsTensor.read()) as Float32Array;
    logitsTensor.dispose();
    const logits = all.slice(all.length - model.config.vocabSize);
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
    const timed = intervals.slice(settings.warmupTokens).sort((a, b) => a - b);
    const median = quantile(timed, 0.5);
    return {
      loadMs,
      ...(copyGbps === undefined ? {} : { copyGbps }),
      logits,
      run: {
        msPerToken: median,
        p10Ms: quantile(timed, 0.1),
        p90Ms: quantile(timed, 0.9),
        tokensPerSecond: 1000 / median,
        prefillMs,
        tokens,
      },
    };
  } finally {
    model.dispose();
  }
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
  readonly weightBytes: number;
  /** The highest copy bandwidth measured (GB/s): the limit is the weights' bytes over it. */
  readonly bandwidthGbps?: number;
  readonly limitMs?: number;
  readonly backends: readonly Omit<DecodeBackendResult, 'logits'>[];
  readonly torch: TorchDecodeEntry;
  /** Every run against the first one that finished: where tokens part (-1: never), and the logits' max |Δ|. */
  readonly agreement: readonly {
    readonly run: string;
    readonly reference: string;
    readonly firstDisagreement: number;
    readonly logitsMaxDiff?: number;
  }[];
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
  const dir = resolve(settings.weights, settings.config);
  await mkdir(dir, { recursive: true });
  await mkdir(settings.out, { recursive: true });
  log(`weights: ${dir}`);
  const weightBytes = await writeSeededLlama(dir, hfConfig, settings.seed);
  const prompt = decodePrompt(hfConfig.vocab_size as number, settings.promptTokens, settings.seed);
  const results: DecodeBackendResult[] = [];
  for (const status of await probeBackends(settings.backends)) {
    if (!status.available) {
      results.push({
        backend: status.name,
        device: '',
        status: 'unavailable',
        reason: status.reason ?? 'unavailable',
      });
      continue;
    }
    const backend = await createBackend(status.name);
    try {
      log(`${status.name}: decoding ${settings.newTokens} tokens after ${prompt.length}`);
      const r = await decodeOnBackend(backend, dir, prompt, settings);
      results.push({ backend: status.name, device: backend.info.device, status: 'ok', ...r });
      log(`${status.name}: ${r.run!.msPerToken.toFixed(3)} ms/token`);
    } catch (error) {
      const reason = error instanceof Error ? error.message : String(error);
      results.push({ backend: status.name, device: backend.info.device, status: 'error', reason });
      log(`${status.name}: error: ${reason}`);
    } finally {
      backend.dispose();
    }
  }
  const torch: TorchDecodeOutcome =
    settings.baseline === 'torch'
      ? await runTorchDecode(dir, prompt, settings)
      : { status: 'unavailable', reason: 'not requested (--baseline torch runs it)' };

  const runs: { name: string; tokens: readonly number[]; logits?: Float32Array }[] = [];
  for (const r of results)
    if (r.run)
      runs.push({ name: r.backend, tokens: r.run.tokens, ...(r.logits ? { logits: r.logits } : {}) });
  if (torch.status === 'ok') {
    for (const [method, r] of Object.entries(torch.output.results)) {
      if ('tokens' in r)
        runs.push({
          name: `torch-${method}`,
          tokens: r.tokens,
          ...(torch.logits ? { logits: torch.logits } : {}),
        });
    }
  }
  const reference = runs[0];
  const agreement = reference
    ? runs.slice(1).map((r) => ({
        run: r.name,
        reference: reference.name,
        firstDisagreement: firstDisagreement(r.tokens, reference.tokens),
        ...(r.logits && reference.logits ? { logitsMaxDiff: maxAbsDiff(r.logits, reference.logits) } : {}),
      }))
    : [];
  const bandwidths = results.flatMap((r) => (r.copyGbps === undefined ? [] : [r.copyGbps]));
  const bandwidthGbps = bandwidths.length ? Math.max(...bandwidths) : undefined;
  const report: DecodeReport = {
    schema: 'rayo-decode-bench/1',
    createdAt: new Date().toISOString(),
    settings,
    hfConfig,
    weightBytes,
    ...(bandwidthGbps === undefined
      ? {}
      : { bandwidthGbps, limitMs: (weightBytes / (bandwidthGbps * 1e9)) * 1e3 }),
    backends: results.map(({ logits: _logits, ...rest }) => rest),
    torch: torch.status === 'ok' ? { status: 'ok', output: torch.output } : torch,
    agreement,
  };
  await writeFile(join(settings.out, 'report.json'), `${JSON.stringify(report, null, 2)}\n`);
  await writeFile(join(settings.out, 'report.md'), decodeMarkdown(report));
  return report;
}

function fmt(x: number | undefined, digits = 3): string {
  return x === undefined || !Number.isFinite(x) ? '—' : String(Number(x.toPrecision(digits)));
}

/** The rows of the summary: each rayo backend and each PyTorch way, with ms/token and the limit. */
export function decodeRows(report: DecodeReport): string[][] {
  const limit = report.limitMs;
  const row = (
    name: string,
    run: { msPerToken: number; tokensPerSecond: number; prefillMs: number } | undefined,
    note: string,
  ) =>
    run
      ? [
          name,
          fmt(run.msPerToken),
          fmt(run.tokensPerSecond, 4),
          fmt(run.prefillMs),
          limit ? `${fmt((100 * limit) / run.msPerToken, 2)}%` : '—',
          note,
        ]
      : [name, '—', '—', '—', '—', note];
  const rows = report.backends.map((b) =>
    row(b.backend, b.run, b.status === 'ok' ? b.device : `${b.status}: ${b.reason}`),
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

const HEADER = ['run', 'ms/token', 'tokens/s', 'prefill ms', 'of limit', 'device / note'];

export function decodeSummary(report: DecodeReport): string {
  const rows = [HEADER, ...decodeRows(report)];
  const widths = HEADER.map((_, i) => Math.max(...rows.map((r) => r[i]!.length)));
  const line = (r: string[]) =>
    r
      .map((c, i) => c.padEnd(widths[i]!))
      .join('  ')
      .trimEnd();
  const out = [line(rows[0]!), widths.map((w) => '-'.repeat(w)).join('  '), ...rows.slice(1).map(line)];
  out.push(
    '',
    `${report.settings.config}: ${fmt(report.weightBytes / 1e9)} GB of fp32 weights; limit ${fmt(report.limitMs)} ms/token at ${fmt(report.bandwidthGbps, 4)} GB/s`,
  );
  for (const a of report.agreement) {
    out.push(
      `${a.run} vs ${a.reference}: ${a.firstDisagreement < 0 ? 'same tokens' : `tokens part at ${a.firstDisagreement}`}` +
        (a.logitsMaxDiff === undefined ? '' : `, prompt logits max |Δ| ${fmt(a.logitsMaxDiff, 2)}`),
    );
  }
  return `${out.join('\n')}\n`;
}

export function decodeMarkdown(report: DecodeReport): string {
  const s = report.settings;
  const rows = decodeRows(report);
  const table = [
    `| ${HEADER.join(' | ')} |`,
    `| ${HEADER.map(() => '---').join(' | ')} |`,
    ...rows.map((r) => `| ${r.join(' | ')} |`),
  ];
  return `${[
    '# rayo decode-bench',
    '',
    `${report.createdAt}. Model \`${s.config}\` (${fmt(report.weightBytes / 1e9)} GB of fp32 weights, seed ${s.seed}), ` +
      `greedy decoding of ${s.newTokens} tokens after a prompt of ${s.promptTokens}; ms/token is the median ` +
      `interval between tokens after ${s.warmupTokens} untimed ones, each token read back to the host. ` +
      `The limit is the weights' bytes over the best copy bandwidth measured (${fmt(report.bandwidthGbps, 4)} GB/s): ` +
      `${fmt(report.limitMs)} ms/token.`,
    '',
    ...table,
    '',
    '## Agreement',
    '',
    ...(report.agreement.length
      ? report.agreement.map(
          (a) =>
            `- ${a.run} vs ${a.reference}: ${a.firstDisagreement < 0 ? 'the same tokens' : `tokens part at index ${a.firstDisagreement}`}` +
            (a.logitsMaxDiff === undefined
              ? ''
              : `; the prompt's logits differ by at most ${fmt(a.logitsMaxDiff, 2)}`),
        )
      : ['- only one run']),
  ].join('\n')}\n`;
}

export const DECODE_USAGE = `Usage: decode-bench [options]

Decodes a Llama-shaped model with seeded weights greedily on rayo backends
and, with --baseline torch, in PyTorch (eager and as one CUDA graph per step)
from the same checkpoint, and reports ms per token against the bandwidth limit.

  --config NAME     ${Object.keys(DECODE_CONFIGS).join(', ')} (default llama-d2048-hd64)
  --backends LIST   rayo backends (default cuda,wgpu)
  --prompt N        prompt tokens (default 1024)
  --new N           tokens to generate (default 128)
  --warmup N        untimed tokens at the start (default 8)
  --baseline NAME   torch or none (default none)
  --torch-device D  the PyTorch device (default cuda; cpu only checks the script)
  --seed N          weights and prompt (default 0)
  --weights DIR     where the checkpoints are written once and reused (default decode-weights)
  --out DIR         report folder (default decode-results)`;

export function parseDecodeArgs(argv: readonly string[]): DecodeSettings {
  const { values } = parseArgs({
    args: [...argv],
    options: {
      config: { type: 'string', default: 'llama-d2048-hd64' },
      backends: { type: 'string', default: 'cuda,wgpu' },
      prompt: { type: 'string', default: '1024' },
      new: { type: 'string', default: '128' },
      warmup: { type: 'string', default: '8' },
      baseline: { type: 'string', default: 'none' },
      'torch-device': { type: 'string', default: 'cuda' },
      seed: { type: 'string', default: '0' },
      weights: { type: 'string', default: 'decode-weights' },
      out: { type: 'string', default: 'decode-results' },
    },
  });
  const int = (name: string, text: string, min: number) => {
    const v = Number(text);
    if (!Number.isInteger(v) || v < min)
      throw new Error(`--${name} must be an integer >= ${min}, got ${text}`);
    return v;
  };
  if (values.baseline !== 'torch' && values.baseline !== 'none')
    throw new Error(`--baseline must be torch or none, got ${values.baseline}`);
  if (!DECODE_CONFIGS[values.config])
    throw new Error(`unknown --config '${values.config}' (known: ${Object.keys(DECODE_CONFIGS).join(', ')})`);
  const newTokens = int('new', values.new, 2);
  const warmupTokens = int('warmup', values.warmup, 0);
  if (warmupTokens >= newTokens - 1)
    throw new Error(`--warmup must leave tokens to time: below ${newTokens - 1}, got ${warmupTokens}`);
  return {
    config: values.config,
    backends: values.backends.split(',').filter(Boolean),
    promptTokens: int('prompt', values.prompt, 1),
    newTokens,
    warmupTokens,
    seed: int('seed', values.seed, 0),
    baseline: values.baseline,
    torchDevice: values['torch-device'],
    weights: values.weights,
    out: values.out,
  };
}
