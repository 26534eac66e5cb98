import { mkdtemp, rm, symlink } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { tokenizerCorpus } from './corpus.js';
import { folderOf, PARITY_VOCABULARIES } from './parityVocabularies.js';
import { tokenizerParity } from './tokenizerParity.js';

describe('tokenizerCorpus', () => {
  it('gives the same strings for a seed, valid UTF-16, with the specials it is given', () => {
    const a = tokenizerCorpus(3, 2500, ['<|im_end|>']);
    expect(a.length).toBeGreaterThanOrEqual(2500);
    expect(tokenizerCorpus(3, 2500, ['<|im_end|>'])).toEqual(a);
    expect(tokenizerCorpus(4, 2500, ['<|im_end|>'])).not.toEqual(a);
    // No lone surrogate: each string survives a round trip through UTF-8.
    for (const s of a)
      expect(new TextDecoder().decode(new TextEncoder().encode(s)), JSON.stringify(s)).toBe(s);
    expect(a.filter((s) => s.includes('<|im_end|>')).length).toBeGreaterThan(10);
    // Many scripts, emoji and whitespace runs are there.
    for (const pattern of [
      /\p{Script=Han}/u,
      /\p{Script=Cyrillic}/u,
      /\p{Script=Arabic}/u,
      /\p{Extended_Pictographic}/u,
      / {4}/,
      /\t/,
      /\r\n/,
    ]) {
      expect(
        a.some((s) => pattern.test(s)),
        String(pattern),
      ).toBe(true);
    }
  });
});

describe('tokenizerParity', () => {
  let dir: string;
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'rayo-parity-'));
    const require = createRequire(import.meta.url);
    for (const v of PARITY_VOCABULARIES.filter((v) => v.folder === undefined)) {
      await symlink(join(dirname(require.resolve(v.packageName)), '..', 'models'), join(dir, v.name));
    }
  });
  afterAll(() => rm(dir, { recursive: true, force: true }));

  it.each(PARITY_VOCABULARIES.map((v) => [v.name, v] as const))(
    '%s: rayo, its GGUF layout and @lenml/tokenizers agree on the corpus, and decoding returns the text',
    async (_name, vocabulary) => {
      const result = await tokenizerParity(vocabulary, join(dir, folderOf(vocabulary)), 9, 120);
      expect(result.strings).toHaveLength(120);
      // The LlamaTokenizer class (the SentencePiece vocabularies) encodes some texts otherwise than the saved pipeline.
      const classPipeline = folderOf(vocabulary) === 'mistral';
      let differ = 0;
      for (const s of result.strings) {
        expect(s.ggufIds, s.text).toEqual(s.savedIds);
        expect(s.lenmlIds, s.text).toEqual(s.savedIds);
        if (JSON.stringify(s.ids) !== JSON.stringify(s.savedIds)) differ++;
        expect(s.idsPlain.length).toBeLessThanOrEqual(s.ids.length);
      }
      if (classPipeline) expect(differ).toBeGreaterThan(0);
      else expect(differ).toBe(0);
      expect(result.chats.length).toBe(folderOf(vocabulary) === 'mistral' ? 0 : 3);
      for (const chat of result.chats) expect(chat.rendered).toContain(chat.messages[0]!.content.trim());
    },
  );
});
