import { InvalidArgumentError } from '@rayo/core';
import { joinModelPath, type OpenFile, openNodeFile } from '@rayo/train';
import { MAX_TOKENIZER_JSON_BYTES, readOptionalJsonObject, readOptionalText } from '../files/boundedFiles.js';
import type { TokenizerSource } from './tokenizerSource.js';

const KERNEL = 'Tokenizer.load';

/**
 * The tokenizer files of a Hugging Face model folder: `tokenizer.json`
 * (required), `tokenizer_config.json`, and the chat templates transformers
 * also saves beside them (`chat_template.jinja`, `chat_template.json`).
 * BOS/EOS that only `special_tokens_map.json` names are taken from it.
 * Files are opened with `openFile` (default: Node's file system; a URL
 * opener reads them over HTTP).
 */
export async function readHuggingFaceTokenizer(
  dir: string,
  openFile: OpenFile = openNodeFile,
): Promise<TokenizerSource> {
  const join = joinModelPath;
  const tokenizerPath = join(dir, 'tokenizer.json');
  const tokenizer = await readOptionalJsonObject(tokenizerPath, KERNEL, MAX_TOKENIZER_JSON_BYTES, openFile);
  if (tokenizer === undefined) {
    const sentencePiece = await openFile(join(dir, 'tokenizer.model')).then(
      async (file) => {
        await file.close();
        return true;
      },
      () => false,
    );
    throw new InvalidArgumentError(`the model folder has no tokenizer.json`, {
      operation: KERNEL,
      argument: tokenizerPath,
      expected:
        'a tokenizer.json (the Hugging Face tokenizers format) beside config.json' +
        (sentencePiece
          ? '; the folder has only a SentencePiece tokenizer.model: save the tokenizer with transformers (tokenizer.save_pretrained) to write tokenizer.json'
          : ''),
      actual: 'no such file',
    });
  }
  const config =
    (await readOptionalJsonObject(join(dir, 'tokenizer_config.json'), KERNEL, undefined, openFile)) ?? {};
  const map = await readOptionalJsonObject(join(dir, 'special_tokens_map.json'), KERNEL, undefined, openFile);
  if (map !== undefined) {
    for (const key of ['bos_token', 'eos_token', 'unk_token', 'pad_token']) {
      if (config[key] === undefined && map[key] !== undefined) config[key] = map[key];
    }
  }
  const chatTemplates = new Map<string, string>();
  const jsonTemplatePath = join(dir, 'chat_template.json');
  const jsonTemplate = await readOptionalJsonObject(jsonTemplatePath, KERNEL, undefined, openFile);
  if (jsonTemplate !== undefined) {
    const template = jsonTemplate.chat_template;
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
  const jinja = await readOptionalText(join(dir, 'chat_template.jinja'), KERNEL, undefined, openFile);
  if (jinja !== undefined) chatTemplates.set('default', jinja);
  return {
    name: tokenizerPath,
    tokenizer,
    config,
    chatTemplates,
  };
}
