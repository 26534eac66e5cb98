import { mkdir, mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { characterTokenizerFiles } from '@rayo/text';
import { tinyLlamaConfig, tinyLlamaWeights, writeTinyLlama } from '@rayo/train-testkit';

/** `<s>`, `</s>`, a newline and printable ASCII but `~`: 97 tokens, the tiny Llama's vocab. */
export const TINY_CHARACTERS: readonly string[] = [
  '\n',
  ...Array.from({ length: 94 }, (_, i) => String.fromCharCode(0x20 + i)),
];

/** A chat template for the tiny model: every turn as `<role>: text`, then `assistant:`. */
export const TINY_CHAT_TEMPLATE =
  "{{ bos_token }}{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}" +
  '{% if add_generation_prompt %}assistant:{% endif %}';

export interface TinyTextModelOptions {
  readonly chatTemplate?: string | null;
  readonly generationConfig?: Record<string, unknown>;
  readonly seed?: number;
  /** Leaves tokenizer.json out. */
  readonly withoutTokenizer?: boolean;
  readonly dir?: string;
}

/**
 * A tiny random Llama checkpoint (2 layers, d 64, vocab 97) with a
 * character tokenizer (`<s>`, `</s>`, printable ASCII), a chat template and
 * an optional generation_config.json, written to a new folder.
 */
export async function writeTinyTextModel(options: TinyTextModelOptions = {}): Promise<string> {
  const config = tinyLlamaConfig({ max_position_embeddings: 256 });
  const dir = options.dir ?? (await mkdtemp(join(tmpdir(), 'rayo-tiny-text-')));
  await mkdir(dir, { recursive: true });
  await writeTinyLlama(config, tinyLlamaWeights(config, options.seed ?? 3), { dir });
  if (!options.withoutTokenizer) {
    const files = characterTokenizerFiles(TINY_CHARACTERS, {
      specialTokens: ['<s>', '</s>'],
      bosToken: '<s>',
      eosToken: '</s>',
      ...(options.chatTemplate === null ? {} : { chatTemplate: options.chatTemplate ?? TINY_CHAT_TEMPLATE }),
    });
    await writeFile(join(dir, 'tokenizer.json'), JSON.stringify(files.tokenizer));
    await writeFile(join(dir, 'tokenizer_config.json'), JSON.stringify(files.config));
  }
  if (options.generationConfig) {
    await writeFile(join(dir, 'generation_config.json'), JSON.stringify(options.generationConfig));
  }
  return dir;
}
