import { InvalidArgumentError } from '@rayo/core';
import type { TokenizerSource } from './tokenizerSource.js';

const KERNEL = 'Tokenizer.load';

async function readOptional(path: string): Promise<string | undefined> {
  const { readFile } = await import('node:fs/promises');
  try {
    return await readFile(path, 'utf8');
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw error;
  }
}

function parseJson(path: string, text: string): Record<string, unknown> {
  try {
    const value: unknown = JSON.parse(text);
    if (typeof value !== 'object' || value === null || Array.isArray(value)) throw new Error('not an object');
    return value as Record<string, unknown>;
  } catch (error) {
    throw new InvalidArgumentError(`${path} is not a JSON object`, {
      operation: KERNEL,
      argument: path,
      expected: 'a JSON object',
      actual: error instanceof Error ? error.message : String(error),
      cause: error,
    });
  }
}

/**
 * The tokenizer files of a Hugging Face model folder: `tokenizer.json`
 * (required), `tokenizer_config.json`, and the chat templates transformers
 * also saves beside them (`chat_template.jinja`, `chat_template.json`).
 * BOS/EOS that only `special_tokens_map.json` names are taken from it.
 */
export async function readHuggingFaceTokenizer(dir: string): Promise<TokenizerSource> {
  const { join } = await import('node:path');
  const tokenizerPath = join(dir, 'tokenizer.json');
  const tokenizerText = await readOptional(tokenizerPath);
  if (tokenizerText === undefined) {
    const sentencePiece = await readOptional(join(dir, 'tokenizer.model'));
    throw new InvalidArgumentError(`the model folder has no tokenizer.json`, {
      operation: KERNEL,
      argument: tokenizerPath,
      expected:
        'a tokenizer.json (the Hugging Face tokenizers format) beside config.json' +
        (sentencePiece !== undefined
          ? '; the folder has only a SentencePiece tokenizer.model: save the tokenizer with transformers (tokenizer.save_pretrained) to write tokenizer.json'
          : ''),
      actual: 'no such file',
    });
  }
  const configPath = join(dir, 'tokenizer_config.json');
  const configText = await readOptional(configPath);
  const config = configText === undefined ? {} : parseJson(configPath, configText);
  const mapText = await readOptional(join(dir, 'special_tokens_map.json'));
  if (mapText !== undefined) {
    const map = parseJson(join(dir, 'special_tokens_map.json'), mapText);
    for (const key of ['bos_token', 'eos_token', 'unk_token', 'pad_token']) {
      if (config[key] === undefined && map[key] !== undefined) config[key] = map[key];
    }
  }
  const chatTemplates = new Map<string, string>();
  const jsonTemplatePath = join(dir, 'chat_template.json');
  const jsonTemplate = await readOptional(jsonTemplatePath);
  if (jsonTemplate !== undefined) {
    const template = parseJson(jsonTemplatePath, jsonTemplate).chat_template;
    if (typeof template !== 'string') {
      throw new InvalidArgumentError(`${jsonTemplatePath} has no chat_template string`, {
        operation: KERNEL,
        argument: `${jsonTemplatePath}: chat_template`,
        expected: 'a string',
        actual: typeof template,
      });
    }
    chatTemplates.set('default', template);
  }
  const jinja = await readOptional(join(dir, 'chat_template.jinja'));
  if (jinja !== undefined) chatTemplates.set('default', jinja);
  return {
    name: tokenizerPath,
    tokenizer: parseJson(tokenizerPath, tokenizerText),
    config,
    chatTemplates,
  };
}
