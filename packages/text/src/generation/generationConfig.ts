import { InvalidArgumentError } from '@rayo/core';
import { joinModelPath, type OpenFile } from '@rayo/train';
import { readOptionalJsonObject } from '../files/boundedFiles.js';

/** What `generation_config.json` asks of generation, as far as rayo honours it. */
export interface GenerationDefaults {
  /** Ids that end generation (`eos_token_id`: a number or a list). */
  readonly eosTokenIds: readonly number[];
  /** Sampling defaults: `do_sample` false (or absent) is greedy, i.e. temperature 0. */
  readonly temperature?: number;
  readonly topK?: number;
  readonly topP?: number;
  readonly maxNewTokens?: number;
  /** `max_length`: prompt and new tokens together. */
  readonly maxLength?: number;
  /** Fields the file sets that rayo does not apply (e.g. `repetition_penalty`), with their values. */
  readonly notApplied: Readonly<Record<string, unknown>>;
}

const KERNEL = 'generation_config.json';

/** Fields that only describe the model or whose values change nothing here. */
const INERT = new Set([
  '_from_model_config',
  'transformers_version',
  'bos_token_id',
  'pad_token_id',
  'decoder_start_token_id',
  'do_sample',
  'temperature',
  'top_k',
  'top_p',
  'max_new_tokens',
  'max_length',
  'eos_token_id',
  'use_cache',
  'num_beams',
  'num_return_sequences',
  'output_attentions',
  'output_hidden_states',
  'return_dict_in_generate',
]);

/** Values of the fields rayo does not implement that change nothing (transformers' defaults). */
const NEUTRAL: Readonly<Record<string, unknown>> = {
  repetition_penalty: 1,
  length_penalty: 1,
  no_repeat_ngram_size: 0,
  min_length: 0,
  min_new_tokens: null,
  typical_p: 1,
  min_p: null,
  epsilon_cutoff: 0,
  eta_cutoff: 0,
  diversity_penalty: 0,
  num_beam_groups: 1,
  early_stopping: false,
};

function wrong(source: string, field: string, expected: string, actual: unknown): never {
  throw new InvalidArgumentError(`${source}: '${field}' is not readable`, {
    operation: KERNEL,
    argument: `${source}: ${field}`,
    expected,
    actual: JSON.stringify(actual) ?? String(actual),
  });
}

function nonNegativeInteger(source: string, field: string, value: unknown): number | undefined {
  if (value === undefined || value === null) return undefined;
  if (!Number.isInteger(value) || (value as number) < 0) wrong(source, field, 'an integer >= 0', value);
  return value as number;
}

function finiteNumber(source: string, field: string, value: unknown): number | undefined {
  if (value === undefined || value === null) return undefined;
  if (typeof value !== 'number' || !Number.isFinite(value)) wrong(source, field, 'a finite number', value);
  return value;
}

/**
 * Reads a parsed `generation_config.json`: EOS ids (a number or a list),
 * and, when `do_sample` is true, `temperature` (default 1), `top_k`
 * (default 50; 0 means all tokens) and `top_p` (default 1), as transformers
 * applies them; `max_new_tokens` and `max_length`. Fields rayo does not
 * implement are listed in `notApplied` (unless they hold their neutral
 * value), so that a caller can say so rather than drop them silently.
 */
export function parseGenerationConfig(
  source: string,
  config: Readonly<Record<string, unknown>>,
): GenerationDefaults {
  const eos = config.eos_token_id;
  let eosTokenIds: number[] = [];
  if (eos !== undefined && eos !== null) {
    const list = Array.isArray(eos) ? eos : [eos];
    list.forEach((id, i) => {
      if (!Number.isInteger(id) || id < 0) {
        wrong(
          source,
          Array.isArray(eos) ? `eos_token_id[${i}]` : 'eos_token_id',
          'a token id (integer >= 0)',
          id,
        );
      }
    });
    eosTokenIds = list as number[];
  }
  const doSample = config.do_sample;
  if (doSample !== undefined && doSample !== null && typeof doSample !== 'boolean') {
    wrong(source, 'do_sample', 'true or false', doSample);
  }
  const temperature = finiteNumber(source, 'temperature', config.temperature);
  const topK = nonNegativeInteger(source, 'top_k', config.top_k);
  const topP = finiteNumber(source, 'top_p', config.top_p);
  const maxNewTokens = nonNegativeInteger(source, 'max_new_tokens', config.max_new_tokens);
  const maxLength = nonNegativeInteger(source, 'max_length', config.max_length);
  const notApplied: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(config)) {
    if (INERT.has(key)) continue;
    if (key in NEUTRAL && JSON.stringify(NEUTRAL[key]) === JSON.stringify(value)) continue;
    notApplied[key] = value;
  }
  const sampled = doSample === true;
  const k = topK ?? 50;
  return {
    eosTokenIds,
    ...(sampled
      ? {
          temperature: temperature ?? 1,
          ...(k > 0 ? { topK: k } : {}),
          topP: topP ?? 1,
        }
      : { temperature: 0 }),
    ...(maxNewTokens !== undefined ? { maxNewTokens } : {}),
    ...(maxLength !== undefined ? { maxLength } : {}),
    notApplied,
  };
}

/**
 * Reads `generation_config.json` from a model folder (through `openFile`, default
 * Node's file system), or undefined when there is none.
 */
export async function readGenerationConfig(
  dir: string,
  openFile?: OpenFile,
): Promise<GenerationDefaults | undefined> {
  const path = joinModelPath(dir, 'generation_config.json');
  const parsed = await readOptionalJsonObject(path, KERNEL, undefined, openFile);
  return parsed === undefined ? undefined : parseGenerationConfig(path, parsed);
}
