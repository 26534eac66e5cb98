import { TokenizerLoader } from '@lenml/tokenizers';
import { ggufVocabulary, readHuggingFaceTokenizer, Tokenizer } from '@rayo/text';
import { tokenizerCorpus } from './corpus.js';
import { folderOf, type ParityVocabulary } from './parityVocabularies.js';

/** What rayo (and, for comparison, @lenml/tokenizers) made of one string. */
export interface ParityString {
  readonly text: string;
  /** `encode(text)`: with the special tokens the tokenizer adds (BOS). */
  readonly ids: readonly number[];
  /** `encode(text, { addSpecialTokens: false })`. */
  readonly idsPlain: readonly number[];
  /**
   * `encode(text)` with the pipeline tokenizer.json saved, not the one its
   * tokenizer class defines (they differ for LlamaTokenizer: see
   * @rayo/text's README); what the GGUF layout and @lenml/tokenizers match.
   */
  readonly savedIds: readonly number[];
  /** The GGUF layout of the same vocabulary: `encode(text)`. */
  readonly ggufIds: readonly number[];
  /** @lenml/tokenizers' `encode(text)`, for the comparison of libraries. */
  readonly lenmlIds: readonly number[];
  /** `decode(idsPlain)` (special tokens kept, the config's clean-up). */
  readonly decoded: string;
  /** `decode(ids, { skipSpecialTokens: true })`. */
  readonly decodedSkip: string;
}

export interface ParityChat {
  readonly messages: readonly { role: string; content: string }[];
  /** The chat template's text with the generation prompt. */
  readonly rendered: string;
}

export interface ParityVocabularyResult {
  readonly name: string;
  /** The folder it was read from, under the vocabularies directory, and the settings laid over its config. */
  readonly folder: string;
  readonly configOverrides: Readonly<Record<string, unknown>>;
  readonly description: string;
  readonly strings: readonly ParityString[];
  readonly chats: readonly ParityChat[];
  /** Milliseconds to encode every string once, per library (one run; a rough figure). */
  readonly encodeMs: { readonly rayo: number; readonly lenml: number };
  readonly characters: number;
}

const CONVERSATIONS = [
  [{ role: 'user', content: 'Hello!' }],
  [
    { role: 'system', content: 'You answer in one line.' },
    { role: 'user', content: 'What is 2 + 2?' },
  ],
  [
    { role: 'user', content: 'Bonjour, ça va ? 😀' },
    { role: 'assistant', content: 'Très bien, merci.' },
    { role: 'user', content: '  spaces  and\nnewlines\t' },
  ],
];

/** Encodes and decodes `count` strings of the seeded corpus with one vocabulary, read from `folder`. */
export async function tokenizerParity(
  vocabulary: ParityVocabulary,
  folder: string,
  seed: number,
  count: number,
): Promise<ParityVocabularyResult> {
  const read = await readHuggingFaceTokenizer(folder);
  const source = { ...read, config: { ...read.config, ...vocabulary.configOverrides } };
  const tokenizer = new Tokenizer(source);
  const { tokenizer_class: _class, ...savedConfig } = source.config;
  const saved = new Tokenizer({ ...source, config: savedConfig });
  const gguf = Tokenizer.fromGguf(
    new Map(ggufVocabulary(source, vocabulary.pre ? { pre: vocabulary.pre } : {})),
    `${vocabulary.name}.gguf`,
  );
  const lenml = TokenizerLoader.fromPreTrained({
    tokenizerJSON: source.tokenizer as never,
    // The shipped config: @lenml/tokenizers reads `legacy` its own way (as transformers 4's slow tokenizer).
    tokenizerConfig: (read.config ?? {}) as never,
  });
  const specials = [...tokenizer.specialTokenIds].slice(0, 8).map((id) => tokenizer.idToToken(id)!);
  const texts = tokenizerCorpus(seed, count, specials);
  let started = performance.now();
  const ids = texts.map((text) => tokenizer.encode(text));
  const rayoMs = performance.now() - started;
  started = performance.now();
  const lenmlIds = texts.map((text) => lenml.encode(text) as number[]);
  const lenmlMs = performance.now() - started;
  const strings = texts.map((text, i) => {
    const idsPlain = tokenizer.encode(text, { addSpecialTokens: false });
    return {
      text,
      ids: ids[i]!,
      idsPlain,
      savedIds: saved.encode(text),
      ggufIds: gguf.encode(text),
      lenmlIds: lenmlIds[i]!,
      decoded: tokenizer.decode(idsPlain),
      decodedSkip: tokenizer.decode(ids[i]!, { skipSpecialTokens: true }),
    };
  });
  const chats = tokenizer.hasChatTemplate()
    ? CONVERSATIONS.map((messages) => ({ messages, rendered: tokenizer.applyChatTemplate(messages) }))
    : [];
  return {
    name: vocabulary.name,
    folder: folderOf(vocabulary),
    configOverrides: vocabulary.configOverrides ?? {},
    description: vocabulary.description,
    strings,
    chats,
    encodeMs: { rayo: rayoMs, lenml: lenmlMs },
    characters: texts.reduce((n, t) => n + t.length, 0),
  };
}
