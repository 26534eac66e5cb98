import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { findPackageScript, runPythonScript } from '@rayo/bench';
import type { Backend } from '@rayo/core';
import { LlamaModel } from '@rayo/train';
import { createBackendFromEnvironment } from '../backendFromEnvironment.js';
import { PARITY_FAMILIES, PARITY_LAYERS, type ParityFamily, parityFamily } from './parityFamilies.js';

/**
 * Model-family parity: checkpoints of every supported family written by
 * `transformers` itself (torch_family_parity.py, on a host with PyTorch),
 * then loaded by rayo on each backend in f32 and bf16, greedy-decoded from
 * the same prompt, and compared token for token with `generate`'s. A run
 * also decodes with the reference's tokens fed back (teacher forcing), so
 * that one early difference does not hide the rest: every position whose
 * reference margin is clear must get the reference's token.
 */

export type ParityDType = 'f32' | 'bf16';

export interface ParitySettings {
  /** Folder of the request, the reference, the checkpoints and the report. */
  readonly out: string;
  readonly families: readonly ParityFamily[];
  readonly backends: readonly string[];
  readonly dtypes: readonly ParityDType[];
  readonly promptTokens: number;
  readonly newTokens: number;
  readonly seed: number;
  /** A reference JSON written before (e.g. copied from the PyTorch host): no Python is run. */
  readonly reference?: string;
  readonly torchDevice: string;
  /** Reference steps whose two best logits are closer than this are near-ties, where either token is right. */
  readonly tieMargin: number;
  /** rayo's KV cache: the model's default (half for half weights) or f32 whatever the weights. */
  readonly kvDtype: ParityKvDType;
}

export type ParityKvDType = 'default' | 'f32';

/** One dtype's reference run of a family. */
export interface ReferenceRun {
  readonly checkpoint: string;
  readonly tokens: readonly number[];
  /** Per step, the largest logit minus the second largest. */
  readonly margins: readonly number[];
  /**
   * bf16 only: the same model with the prompt's matrix products taking
   * bf16-rounded inputs (f32 accumulation), as matmul precision 'half' on
   * tensor cores computes them; decode steps stay exact.
   */
  readonly promptRounded?: ReferenceTokens;
  /** bf16 only: the model with every key (after RoPE) and value rounded to bf16 as a bf16 KV cache stores them. */
  readonly cacheRounded?: ReferenceTokens;
  /** bf16 only: both roundings. */
  readonly promptCacheRounded?: ReferenceTokens;
}

interface ReferenceTokens {
  readonly tokens: readonly number[];
  readonly margins: readonly number[];
}

/**
 * The reference a backend's run is held to: a backend whose prompt products
 * run on tensor cores (cuda) rounds their inputs as precision 'half'
 * declares (wgpu computes 'half' exactly, more precise than asked); a model
 * with a half KV cache (`halfCache`) stores its keys and values rounded. A
 * half cache against a reference without that run is refused: its tokens
 * would be held to the wrong numbers.
 */
export function referenceFor(run: ReferenceRun, backend: string, halfCache = false): ReferenceRun {
  const rounded = backend === 'cuda' && run.promptRounded !== undefined;
  if (!halfCache) return rounded ? { ...run, ...run.promptRounded } : run;
  const cached = rounded ? run.promptCacheRounded : run.cacheRounded;
  if (!cached) {
    throw new Error(
      'the reference has no run with a rounded KV cache (written by an older script): run with --kv-dtype f32',
    );
  }
  return { ...run, ...cached };
}

/** What torch_family_parity.py writes. */
export interface FamilyParityReference {
  readonly schema: 'rayo-family-parity/1';
  readonly available: boolean;
  readonly reason?: string;
  readonly torch?: string;
  readonly transformers?: string;
  readonly device?: string;
  readonly families: Readonly<
    Record<
      string,
      | {
          readonly source?: string;
          readonly prompt: readonly number[];
          readonly runs: Readonly<Partial<Record<ParityDType, ReferenceRun>>>;
        }
      | { readonly error: string }
    >
  >;
}

/** How rayo's greedy tokens compare with the reference's. */
export type TokenVerdict = 'same' | 'near-tie' | 'differ';

/** One family, dtype and backend. */
export interface ParityRow {
  readonly family: string;
  readonly dtype: ParityDType;
  readonly backend: string;
  readonly result:
    | {
        readonly tokens: number;
        /** The dtype of rayo's KV cache in this run (the reference's run was chosen by it). */
        readonly kvCacheDtype: string;
        /** Where rayo's greedy tokens part from the reference's (-1: never). */
        readonly firstDisagreement: number;
        /** The reference's margin where they part. */
        readonly marginThere?: number;
        readonly verdict: TokenVerdict;
        /** Teacher-forced positions where rayo's top-1 is the reference's token. */
        readonly forcedAgreement: number;
        /** Teacher-forced positions that disagree although the reference's margin is clear: each a failure. */
        readonly forcedClearDisagreements: number;
      }
    | { readonly error: string };
}

export interface ParityReport {
  readonly schema: 'rayo-family-parity-report/1';
  readonly reference: Omit<FamilyParityReference, 'families'>;
  readonly settings: Omit<ParitySettings, 'families'> & { readonly families: readonly string[] };
  readonly rows: readonly ParityRow[];
  /** True when every row ran and none differs beyond near-ties. */
  readonly passed: boolean;
}

export const PARITY_SCRIPT = 'torch_family_parity.py';

export const PARITY_USAGE = `Usage: family-parity [options]

Writes each model family's checkpoint with transformers (Python with torch and
transformers 5), decodes it greedily there and on each rayo backend in f32 and
bf16, and prints a table family x dtype x backend.

  --families LIST     comma-separated (default: all: ${PARITY_FAMILIES.map((f) => f.name).join(', ')})
  --backends LIST     rayo backends (default cuda,wgpu)
  --dtypes LIST       f32,bf16 (default both)
  --prompt N          prompt tokens, random ids (default 512)
  --new N             generated tokens (default 128)
  --seed N            weights and prompt (default 0)
  --tie-margin X      reference logit margins below X are near-ties (default 1e-3)
  --kv-dtype KIND     rayo's KV cache: default (the weights' dtype where half) or f32
  --reference FILE    a reference JSON already written (skips Python)
  --torch-device DEV  the reference's torch device (default cuda)
  --out DIR           request, reference, checkpoints, report (default family-parity)
  --help`;

export function parseParityArgs(argv: readonly string[]): ParitySettings {
  const { values } = parseArgs({
    args: [...argv],
    options: {
      families: { type: 'string' },
      backends: { type: 'string', default: 'cuda,wgpu' },
      dtypes: { type: 'string', default: 'f32,bf16' },
      prompt: { type: 'string', default: '512' },
      new: { type: 'string', default: '128' },
      seed: { type: 'string', default: '0' },
      'tie-margin': { type: 'string', default: '1e-3' },
      'kv-dtype': { type: 'string', default: 'default' },
      reference: { type: 'string' },
      'torch-device': { type: 'string', default: 'cuda' },
      out: { type: 'string', default: 'family-parity' },
    },
  });
  const int = (name: string, text: string, min: number) => {
    const v = Number(text);
    if (!Number.isInteger(v) || v < min)
      throw new Error(`--${name} must be an integer >= ${min}, got ${text}`);
    return v;
  };
  const families = (values.families?.split(',').filter(Boolean) ?? PARITY_FAMILIES.map((f) => f.name)).map(
    (name) => {
      const family = parityFamily(name);
      if (!family)
        throw new Error(`unknown family '${name}' (known: ${PARITY_FAMILIES.map((f) => f.name).join(', ')})`);
      return family;
    },
  );
  const dtypes = values.dtypes.split(',').filter(Boolean);
  for (const d of dtypes)
    if (d !== 'f32' && d !== 'bf16') throw new Error(`--dtypes takes f32 and bf16, got ${d}`);
  const kvDtype = values['kv-dtype'];
  if (kvDtype !== 'default' && kvDtype !== 'f32')
    throw new Error(`--kv-dtype takes default or f32, got ${kvDtype}`);
  const tieMargin = Number(values['tie-margin']);
  if (!(tieMargin >= 0)) throw new Error(`--tie-margin must be a number >= 0, got ${values['tie-margin']}`);
  return {
    out: values.out,
    families,
    backends: values.backends.split(',').filter(Boolean),
    dtypes: dtypes as ParityDType[],
    promptTokens: int('prompt', values.prompt, 1),
    newTokens: int('new', values.new, 1),
    seed: int('seed', values.seed, 0),
    ...(values.reference !== undefined ? { reference: values.reference } : {}),
    torchDevice: values['torch-device'],
    tieMargin,
    kvDtype,
  };
}

/** Runs torch_family_parity.py: the checkpoints and the reference tokens, under `settings.out`. */
async function writeReference(settings: ParitySettings, log: (line: string) => void): Promise<string> {
  const script = findPackageScript(PARITY_SCRIPT, import.meta.url);
  if (!script) throw new Error(`the script ${PARITY_SCRIPT} was not found`);
  const out = resolve(settings.out);
  const request = join(out, 'request.json');
  const reference = join(out, 'reference.json');
  await writeFile(
    request,
    `${JSON.stringify({
      schema: 'rayo-family-parity-request/1',
      families: settings.families.map((f) => ({ name: f.name, source: f.source, config: f.config })),
      layers: PARITY_LAYERS,
      promptTokens: settings.promptTokens,
      newTokens: settings.newTokens,
      seed: settings.seed,
      dtypes: settings.dtypes,
      checkpoints: join(out, 'checkpoints'),
    })}\n`,
  );
  const outcome = await runPythonScript<FamilyParityReference>({
    script,
    args: ['--request', request, '--out', reference, '--device', settings.torchDevice],
    outFile: reference,
    label: 'the family parity reference',
    onOutput: (text) => log(text.trimEnd()),
  });
  if (outcome.status !== 'ok') throw new Error(`no reference: ${outcome.reason}`);
  return reference;
}

/** Index of the first token where two runs part, or -1 when they agree over the reference's length. */
function firstDisagreement(got: readonly number[], want: readonly number[]): number {
  for (let i = 0; i < want.length; i++) if (got[i] !== want[i]) return i;
  return -1;
}

function argmax(values: ArrayLike<number>): number {
  let best = 0;
  for (let i = 1; i < values.length; i++) if (values[i]! > values[best]!) best = i;
  return best;
}

/** rayo's tokens against one reference run: greedy, then teacher-forced. */
async function compareRun(
  backend: Backend,
  prompt: readonly number[],
  reference: ReferenceRun,
  tieMargin: number,
  kvDtype: ParityKvDType,
): Promise<ParityRow['result']> {
  const model = await LlamaModel.load(backend, reference.checkpoint, {
    maxSequence: prompt.length + reference.tokens.length,
    ...(kvDtype === 'f32' ? { kvCacheDtype: 'f32' as const } : {}),
  });
  try {
    const run = referenceFor(reference, backend.name, model.kvCacheDtype !== 'f32');
    const tokens: number[] = [];
    for await (const t of model.generate(prompt, { maxNewTokens: run.tokens.length })) tokens.push(t);
    const first = firstDisagreement(tokens, run.tokens);
    const marginThere = first >= 0 ? run.margins[first] : undefined;
    const verdict: TokenVerdict =
      first < 0 ? 'same' : marginThere !== undefined && marginThere < tieMargin ? 'near-tie' : 'differ';
    // Teacher forcing: each step is fed the reference's token, so every position is compared.
    model.reset();
    let agree = 0;
    let clearMisses = 0;
    let logits = model.prefill(prompt);
    for (let i = 0; i < run.tokens.length; i++) {
      const all = (await logits.read()) as Float32Array;
      logits.dispose();
      const choice = argmax(all.subarray(all.length - model.config.vocabSize));
      if (choice === run.tokens[i]) agree++;
      else if ((run.margins[i] ?? 0) >= tieMargin) clearMisses++;
      if (i + 1 < run.tokens.length) logits = model.decode(run.tokens[i]!);
    }
    return {
      tokens: run.tokens.length,
      kvCacheDtype: model.kvCacheDtype,
      firstDisagreement: first,
      ...(marginThere !== undefined ? { marginThere } : {}),
      verdict,
      forcedAgreement: agree,
      forcedClearDisagreements: clearMisses,
    };
  } finally {
    model.dispose();
  }
}

/**
 * The whole harness: the reference (run here through Python, or read from
 * `settings.reference`), then every family x dtype x backend. Writes
 * `family-parity.json` under `settings.out` and returns the report.
 */
export async function familyParity(
  settings: ParitySettings,
  log: (line: string) => void = (line) => console.error(line),
): Promise<ParityReport> {
  await mkdir(settings.out, { recursive: true });
  const referencePath = settings.reference ?? (await writeReference(settings, log));
  const reference = JSON.parse(await readFile(referencePath, 'utf8')) as FamilyParityReference;
  if (reference.schema !== 'rayo-family-parity/1')
    throw new Error(`${referencePath} is not a rayo-family-parity/1 reference`);
  if (!reference.available)
    throw new Error(`the reference could not run: ${reference.reason ?? 'no reason given'}`);
  const rows: ParityRow[] = [];
  for (const backendName of settings.backends) {
    let backend: Backend | undefined;
    try {
      backend = await createBackendFromEnvironment(backendName);
    } catch (error) {
      const message = error instanceof Error ? error.message : String(error);
      for (const f of settings.families)
        for (const dtype of settings.dtypes)
          rows.push({ family: f.name, dtype, backend: backendName, result: { error: message } });
      continue;
    }
    try {
      for (const family of settings.families) {
        const entry = reference.families[family.name];
        for (const dtype of settings.dtypes) {
          const row = (result: ParityRow['result']) =>
            rows.push({ family: family.name, dtype, backend: backendName, result });
          if (!entry) {
            row({ error: 'the reference has no run of this family' });
            continue;
          }
          if ('error' in entry) {
            row({ error: `the reference failed: ${entry.error}` });
            continue;
          }
          const run = entry.runs[dtype];
          if (!run) {
            row({ error: `the reference has no ${dtype} run` });
            continue;
          }
          log(`family-parity: ${family.name} ${dtype} on ${backendName}`);
          try {
            row(await compareRun(backend, entry.prompt, run, settings.tieMargin, settings.kvDtype));
          } catch (error) {
            row({ error: error instanceof Error ? error.message : String(error) });
          }
        }
      }
    } finally {
      backend.dispose();
    }
  }
  const { families: _, ...about } = reference;
  const report: ParityReport = {
    schema: 'rayo-family-parity-report/1',
    reference: about,
    settings: { ...settings, families: settings.families.map((f) => f.name) },
    rows,
    passed: rows.every(
      (r) =>
        !('error' in r.result) && r.result.verdict !== 'differ' && r.result.forcedClearDisagreements === 0,
    ),
  };
  await writeFile(join(settings.out, 'family-parity.json'), `${JSON.stringify(report, null, 2)}\n`);
  return report;
}

/** The report as a table: family x dtype x backend. */
export function parityTable(report: ParityReport): string {
  const header = ['family', 'dtype', 'KV cache', 'backend', 'greedy tokens', 'teacher-forced top-1'];
  const lines = report.rows.map((r) => {
    if ('error' in r.result) return [r.family, r.dtype, '', r.backend, `error: ${r.result.error}`, ''];
    const base = [r.family, r.dtype, r.result.kvCacheDtype, r.backend];
    const { tokens, firstDisagreement: first, verdict, marginThere } = r.result;
    const greedy =
      verdict === 'same'
        ? `${tokens}/${tokens} same`
        : `part at ${first} (${verdict}, margin ${marginThere?.toExponential(1) ?? '?'})`;
    const forced = `${r.result.forcedAgreement}/${tokens}${
      r.result.forcedClearDisagreements > 0 ? `, ${r.result.forcedClearDisagreements} clear misses` : ''
    }`;
    return [...base, greedy, forced];
  });
  const widths = header.map((h, i) => Math.max(h.length, ...lines.map((l) => l[i]!.length)));
  const format = (cells: readonly string[]) =>
    cells
      .map((c, i) => c.padEnd(widths[i]!))
      .join('  ')
      .trimEnd();
  const about = report.reference;
  return [
    `reference: transformers ${about.transformers ?? '?'}, torch ${about.torch ?? '?'} on ${about.device ?? '?'}`,
    format(header),
    ...lines.map(format),
    report.passed ? 'family parity: passed' : 'family parity: FAILED',
    '',
  ].join('\n');
}
