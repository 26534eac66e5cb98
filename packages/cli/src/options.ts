import { type ParseArgsConfig, parseArgs } from 'node:util';
import { usageError } from './usageError.js';

/** Flags every model command takes. */
export const MODEL_FLAGS = {
  model: { type: 'string', short: 'm' },
  backend: { type: 'string', short: 'b' },
  dtype: { type: 'string' },
  'kv-dtype': { type: 'string' },
  quant: { type: 'string' },
  activations: { type: 'string' },
  'max-sequence': { type: 'string' },
  'max-new-tokens': { type: 'string', short: 'n' },
  temperature: { type: 'string', short: 't' },
  'top-k': { type: 'string' },
  'top-p': { type: 'string' },
  seed: { type: 'string' },
  stop: { type: 'string', multiple: true },
  system: { type: 'string', short: 's' },
  quiet: { type: 'boolean', short: 'q' },
  help: { type: 'boolean', short: 'h' },
} as const;

/** The backends rayo publishes; any other name is looked up as an installed backend package. */
export const BACKENDS = ['auto', 'cpu', 'wgpu', 'cuda'] as const;
export const DTYPES = ['checkpoint', 'f32', 'f16', 'bf16'] as const;
export const KV_DTYPES = ['f32', 'f16', 'bf16'] as const;
export const QUANTS = ['q8', 'q4g32', 'q4g128', 'q8g32', 'q8g16', 'q4g32a'] as const;
export const ACTIVATIONS = ['int8', 'exact'] as const;

/** What a model command was asked, checked. */
export interface ModelOptions {
  readonly model: string;
  /** `auto`, or a backend name for `createBackend`. */
  readonly backend: string;
  readonly dtype?: (typeof DTYPES)[number];
  readonly kvDtype?: (typeof KV_DTYPES)[number];
  readonly quant?: (typeof QUANTS)[number];
  readonly activations?: (typeof ACTIVATIONS)[number];
  readonly maxSequence?: number;
  readonly maxNewTokens?: number;
  readonly temperature?: number;
  readonly topK?: number;
  readonly topP?: number;
  readonly seed?: number;
  readonly stop: readonly string[];
  readonly system?: string;
  readonly quiet: boolean;
}

type Values = Record<string, string | boolean | string[] | undefined>;

function choice<T extends string>(
  command: string,
  flag: string,
  value: unknown,
  choices: readonly T[],
): T | undefined {
  if (value === undefined) return undefined;
  if (!choices.includes(value as T)) usageError(command, flag, choices.join(' | '), JSON.stringify(value));
  return value as T;
}

/** An integer flag's value, at least `least` (undefined when absent). */
export function integerFlag(
  command: string,
  flag: string,
  value: unknown,
  least: number,
): number | undefined {
  if (value === undefined) return undefined;
  const n = Number(value);
  if (!/^-?\d+$/.test(String(value)) || !Number.isSafeInteger(n) || n < least) {
    usageError(command, flag, `an integer >= ${least}`, JSON.stringify(value));
  }
  return n;
}

function real(
  command: string,
  flag: string,
  value: unknown,
  check: (n: number) => boolean,
  expected: string,
) {
  if (value === undefined) return undefined;
  const n = Number(value);
  if (String(value).trim() === '' || !Number.isFinite(n) || !check(n))
    usageError(command, flag, expected, JSON.stringify(value));
  return n;
}

function backendName(command: string, value: unknown): string {
  if (value === undefined) return 'auto';
  if (typeof value !== 'string' || !/^[a-z][\w-]*$/.test(value)) {
    usageError(
      command,
      '--backend',
      `${BACKENDS.join(' | ')} or an installed backend's name`,
      JSON.stringify(value),
    );
  }
  return value;
}

/** Parses `args` with the model flags and `extra`; unknown flags and stray arguments are usage errors. */
export function parseCommand(
  command: string,
  args: readonly string[],
  extra: NonNullable<ParseArgsConfig['options']>,
): Values {
  let parsed: { values: Values; positionals: string[] };
  try {
    parsed = parseArgs({
      args: [...args],
      options: { ...MODEL_FLAGS, ...extra },
      strict: true,
      allowPositionals: true,
    }) as { values: Values; positionals: string[] };
  } catch (error) {
    usageError(command, 'arguments', `the flags of 'rayo ${command} --help'`, (error as Error).message);
  }
  if (parsed.positionals.length > 0) {
    usageError(command, 'arguments', 'flags only', `unexpected ${JSON.stringify(parsed.positionals[0])}`);
  }
  return parsed.values;
}

/** The checked model options of parsed flags (`--model` required unless help was asked). */
export function modelOptions(command: string, values: Values): ModelOptions {
  if (typeof values.model !== 'string' || values.model === '') {
    usageError(command, '--model', 'a Hugging Face model folder or a .gguf file', 'nothing');
  }
  const options: ModelOptions = {
    model: values.model,
    backend: backendName(command, values.backend),
    dtype: choice(command, '--dtype', values.dtype, DTYPES),
    kvDtype: choice(command, '--kv-dtype', values['kv-dtype'], KV_DTYPES),
    quant: choice(command, '--quant', values.quant, QUANTS),
    activations: choice(command, '--activations', values.activations, ACTIVATIONS),
    maxSequence: integerFlag(command, '--max-sequence', values['max-sequence'], 1),
    maxNewTokens: integerFlag(command, '--max-new-tokens', values['max-new-tokens'], 1),
    temperature: real(command, '--temperature', values.temperature, (n) => n >= 0, 'a number >= 0'),
    topK: integerFlag(command, '--top-k', values['top-k'], 1),
    topP: real(command, '--top-p', values['top-p'], (n) => n > 0 && n <= 1, 'a number in (0, 1]'),
    seed: integerFlag(command, '--seed', values.seed, 0),
    stop: (values.stop as string[] | undefined) ?? [],
    ...(typeof values.system === 'string' ? { system: values.system } : {}),
    quiet: values.quiet === true,
  };
  for (const [i, s] of options.stop.entries()) {
    if (s === '') usageError(command, `--stop (${i + 1})`, 'a non-empty string', '""');
  }
  return options;
}
