import { LLAMA3, MISTRAL, QWEN3, TEST_VOCABULARIES } from '@rayo/text-testkit';
import { describe, expect, it } from 'vitest';
import { tokenizerCorpus } from '../../../workloads/src/text/corpus.js';
import { Tokenizer } from '../tokenizer/tokenizer.js';

const tokenizers = new Map<string, Tokenizer>();
const load = async (dir: string) => {
  let t = tokenizers.get(dir);
  if (!t) {
    t = await Tokenizer.load(dir);
    tokenizers.set(dir, t);
  }
  return t;
};

describe.each(TEST_VOCABULARIES.map((v) => [v.name, v] as const))('%s', (_name, vocabulary) => {
  it('streams the text of decoding all at once, one token at a time, never splitting a character', async () => {
    const t = await load(vocabulary.dir);
    const failures: string[] = [];
    for (const text of tokenizerCorpus(5, 300)) {
      const ids = t.encode(text);
      const stream = t.decodeStream();
      const deltas = ids.map((id) => stream.push(id));
      deltas.push(stream.flush());
      const whole = t.decode(ids, { skipSpecialTokens: true, cleanUpTokenizationSpaces: false });
      if (deltas.join('') !== whole || stream.text !== whole) {
        failures.push(`${JSON.stringify(text)}: ${JSON.stringify(deltas)}`);
      }
      // A delta that ends inside a character would hold an unpaired surrogate or U+FFFD.
      if (
        !whole.includes('\uFFFD') &&
        deltas.some((d) => d.includes('\uFFFD') || /[\uD800-\uDBFF]$/.test(d))
      ) {
        failures.push(`split: ${JSON.stringify(deltas)}`);
      }
    }
    expect(failures.slice(0, 3)).toEqual([]);
  });

  it('holds the bytes of a character back until the token that completes it', async () => {
    const t = await load(vocabulary.dir);
    const text = '𝔘';
    const ids = t.encode(text, { addSpecialTokens: false });
    const stream = t.decodeStream();
    const deltas = ids.map((id) => stream.push(id));
    expect(deltas.join('')).toBe(text);
    // Every delta but the last is empty when the character spans several tokens.
    if (ids.length > 1) expect(deltas.slice(0, -1).every((d) => d === '' || d === ' ')).toBe(true);
  });

  it('flushes an incomplete character at the end as U+FFFD', async () => {
    const t = await load(vocabulary.dir);
    const ids = t.encode('𝔘', { addSpecialTokens: false });
    if (ids.length < 2) return; // one token: nothing to split
    const stream = t.decodeStream();
    for (const id of ids.slice(0, -1)) stream.push(id);
    expect(stream.flush()).toMatch(/\uFFFD$/);
  });
});

describe('context: the end of a prompt', () => {
  it('keeps the space of the first generated word after a SentencePiece prompt', async () => {
    const t = await load(MISTRAL.dir);
    const prompt = t.encode('Once upon a time');
    const continuation = t
      .encode('Once upon a time there was', { addSpecialTokens: false })
      .slice(prompt.length - 1);
    expect(t.idToToken(continuation[0]!)).toBe('▁there');
    const withContext = t.decodeStream({ context: prompt });
    expect(continuation.map((id) => withContext.push(id)).join('')).toBe(' there was');
    // Without context the first word starts the text, and SentencePiece drops its space.
    const bare = t.decodeStream();
    expect(continuation.map((id) => bare.push(id)).join('')).toBe('there was');
  });

  it('byte-level tokens carry their own spaces, with or without context', async () => {
    for (const dir of [LLAMA3.dir, QWEN3.dir]) {
      const t = await load(dir);
      const ids = t.encode(' there was', { addSpecialTokens: false });
      const stream = t.decodeStream({ context: t.encode('Once upon a time') });
      expect(ids.map((id) => stream.push(id)).join('')).toBe(' there was');
    }
  });

  it('leaves special tokens out unless asked to keep them', async () => {
    const t = await load(QWEN3.dir);
    const ids = t.encode('<|im_start|>assistant\nHi<|im_end|>');
    const skipping = t.decodeStream();
    expect(ids.map((id) => skipping.push(id)).join('')).toBe('assistant\nHi');
    const keeping = t.decodeStream({ skipSpecialTokens: false });
    expect(ids.map((id) => keeping.push(id)).join('')).toBe('<|im_start|>assistant\nHi<|im_end|>');
    expect(() => keeping.push(t.vocabSize)).toThrow(/TextStream\.push.*ids\[0\]/);
  });
});
