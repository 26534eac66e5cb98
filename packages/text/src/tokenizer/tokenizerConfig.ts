import { InvalidArgumentError } from '@rayo/core';

/** The parts of a Hugging Face `tokenizer_config.json` that decide encoding, decoding and chat. */
export interface TokenizerSettings {
  readonly bosToken?: string;
  readonly eosToken?: string;
  readonly unkToken?: string;
  readonly padToken?: string;
  /** Explicit `add_bos_token` / `add_eos_token`; absent: the tokenizer.json post-processor decides. */
  readonly addBosToken?: boolean;
  readonly addEosToken?: boolean;
  /** `clean_up_tokenization_spaces` (default false, as in transformers 5). */
  readonly cleanUpTokenizationSpaces: boolean;
  /** Chat templates by name; the unnamed one (a plain string in the file) is `default`. */
  readonly chatTemplates: ReadonlyMap<string, string>;
}

const KERNEL = 'Tokenizer';

function wrong(source: string, field: string, expected: string, actual: unknown): never {
  throw new InvalidArgumentError(`${source}: '${field}' is not readable`, {
    operation: KERNEL,
    argument: `${source}: ${field}`,
    expected,
    actual: JSON.stringify(actual)?.slice(0, 120) ?? String(actual),
  });
}

/** A special token as the file writes it: a string, an AddedToken object (`{ content }`), or null. */
export function specialTokenContent(source: string, field: string, value: unknown): string | undefined {
  if (value === undefined || value === null) return undefined;
  if (typeof value === 'string') return value;
  if (typeof value === 'object' && typeof (value as { content?: unknown }).content === 'string') {
    return (value as { content: string }).content;
  }
  return wrong(source, field, 'a string, an object with a string content, or null', value);
}

function optionalBoolean(source: string, field: string, value: unknown): boolean | undefined {
  if (value === undefined || value === null) return undefined;
  if (typeof value !== 'boolean') wrong(source, field, 'true or false', value);
  return value;
}

/**
 * Chat templates as `tokenizer_config.json` (or `chat_template.json`) holds
 * them: one string, or a list of `{ name, template }` (the one named
 * `default` is used unless another is asked for).
 */
export function chatTemplatesOf(source: string, value: unknown): Map<string, string> {
  const templates = new Map<string, string>();
  if (value === undefined || value === null) return templates;
  if (typeof value === 'string') {
    templates.set('default', value);
    return templates;
  }
  if (!Array.isArray(value))
    wrong(source, 'chat_template', 'a string or a list of { name, template }', value);
  for (const [i, entry] of value.entries()) {
    const { name, template } = (entry ?? {}) as { name?: unknown; template?: unknown };
    if (typeof name !== 'string' || typeof template !== 'string') {
      wrong(source, `chat_template[${i}]`, '{ name: string, template: string }', entry);
    }
    templates.set(name, template);
  }
  return templates;
}

/** Reads the settings of a parsed `tokenizer_config.json` (`source` names the file in errors). */
export function parseTokenizerConfig(
  source: string,
  config: Readonly<Record<string, unknown>>,
): TokenizerSettings {
  const token = (field: string) => specialTokenContent(source, field, config[field]);
  const cleanUp = optionalBoolean(
    source,
    'clean_up_tokenization_spaces',
    config.clean_up_tokenization_spaces,
  );
  const bosToken = token('bos_token');
  const eosToken = token('eos_token');
  const unkToken = token('unk_token');
  const padToken = token('pad_token');
  const addBosToken = optionalBoolean(source, 'add_bos_token', config.add_bos_token);
  const addEosToken = optionalBoolean(source, 'add_eos_token', config.add_eos_token);
  return {
    ...(bosToken !== undefined ? { bosToken } : {}),
    ...(eosToken !== undefined ? { eosToken } : {}),
    ...(unkToken !== undefined ? { unkToken } : {}),
    ...(padToken !== undefined ? { padToken } : {}),
    ...(addBosToken !== undefined ? { addBosToken } : {}),
    ...(addEosToken !== undefined ? { addEosToken } : {}),
    cleanUpTokenizationSpaces: cleanUp ?? false,
    chatTemplates: chatTemplatesOf(source, config.chat_template),
  };
}
