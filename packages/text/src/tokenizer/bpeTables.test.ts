import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Tokenizer as HfTokenizer } from '@huggingface/tokenizers';
import { TEST_VOCABULARIES } from '@rayo/text-testkit';
import { GgufFile, openNodeFile, PackedStrings, writeGgufFile } from '@rayo/train';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { tokenizerCorpus } from '../../../workloads/src/text/corpus.js';
import { ggufTokenizerSource } from '../gguf/ggufTokenizer.js';
import { ggufVocabulary } from '../gguf/ggufVocabulary.js';
import { bpeModel, packedBpeModel } from './bpeModel.js';
import {
  buildBpeTables,
  buildBpeTablesInSteps,
  installBpeTables,
  plainBpeModel,
  withoutBpeTables,
} from './bpeTables.js';
import { readHuggingFaceTokenizer } from './huggingFaceFolder.js';
import { Tokenizer } from './tokenizer.js';
import type { TokenizerJson } from './tokenizerSource.js';

// The BPE tables built here must be the library's own, entry for entry, and
// encode and decode every text as the library's construction does.

interface ModelTables {
  tokens_to_ids: Map<string, number>;
  vocab: string[];
  unk_token_id: number | undefined;
  bpe_ranks: Map<string, number>;
}

const tablesOf = (hf: HfTokenizer) => (hf as unknown as { model: ModelTables }).model;

/** A tokenizer.json of `model` alone: no pipeline steps, no added tokens. */
function withModel(model: TokenizerJson['model']): TokenizerJson {
  return {
    version: '1.0',
    normalizer: null,
    pre_tokenizer: null,
    post_processor: null,
    decoder: null,
    added_tokens: [],
    model,
  };
}

/** The library's construction of `json` and ours (tables built at once, or in steps). */
async function bothWays(json: TokenizerJson, inSteps = false) {
  const config = {};
  const library = new HfTokenizer(json, config);
  const model = plainBpeModel(json)!;
  const ours = new HfTokenizer(withoutBpeTables(json, model), config);
  const tables = inSteps ? await buildBpeTablesInSteps(model) : buildBpeTables(model);
  const added = (json.added_tokens ?? []) as { id: number; content: string }[];
  expect(installBpeTables(ours, tables, added)).toBe(true);
  return { library, ours };
}

function expectSameTables(library: HfTokenizer, ours: HfTokenizer): void {
  const a = tablesOf(library);
  const b = tablesOf(ours);
  expect(b.unk_token_id).toBe(a.unk_token_id);
  expect(b.vocab).toEqual(a.vocab);
  for (const name of ['tokens_to_ids', 'bpe_ranks'] as const) {
    expect(b[name].size, name).toBe(a[name].size);
    const differ = [...a[name]].filter(([key, value]) => b[name].get(key) !== value);
    expect(differ.slice(0, 3), name).toEqual([]);
  }
}

/** A byte-level BPE whose tokens and merges hold what JSON escapes, commas, spaces, and array-form merges. */
function awkwardJson(arrayMerges: boolean): TokenizerJson {
  const pieces = ['a', 'b', '"', '\\', '\t', '\u0001', 'é', '😀', ','];
  const vocab: Record<string, number> = {};
  const merges: string[] = [];
  for (const p of pieces) vocab[p] = Object.keys(vocab).length;
  for (const p of pieces) {
    for (const q of pieces) {
      if (vocab[p + q] !== undefined) continue;
      vocab[p + q] = Object.keys(vocab).length;
      merges.push(`${p} ${q}`);
    }
  }
  // A merge with two spaces keeps its first two parts in the library; one without a space, itself.
  merges.push('a b c', 'ab');
  return {
    version: '1.0',
    normalizer: null,
    pre_tokenizer: null,
    post_processor: null,
    decoder: null,
    added_tokens: [{ id: 3, content: '<x>', special: true }],
    model: {
      type: 'BPE',
      unk_token: '"',
      vocab,
      merges: arrayMerges ? merges.map((m) => m.split(' ')) : merges,
    },
  };
}

describe('BPE tables built outside the library', () => {
  it.each([false, true])(
    'are the library’s for merges that need escaping, odd spaces (array merges: %s)',
    async (arrayMerges) => {
      const json = awkwardJson(arrayMerges);
      for (const inSteps of [false, true]) {
        const { library, ours } = await bothWays(json, inSteps);
        expectSameTables(library, ours);
        for (const text of ['ab"\\\t\u0001é😀', 'b"a\\', '<x>ab', '😀😀é']) {
          expect(ours.encode(text).ids).toEqual(library.encode(text).ids);
        }
      }
    },
  );

  it('are the library’s from a vocabulary listed by id, a repeated token keeping its first id', async () => {
    const tokens = ['a', 'b', 'ab', 'b', 'c', 'abc', 'a'];
    const vocab: Record<string, number> = {};
    tokens.forEach((t, id) => {
      if (!(t in vocab)) vocab[t] = id;
    });
    const json = withModel(bpeModel(vocab, ['a b', 'ab c'], { tokensById: tokens }));
    const { library, ours } = await bothWays(json);
    expectSameTables(library, ours);
    expect(tablesOf(ours).tokens_to_ids.get('b')).toBe(1);
    expect(ours.encode('abcab').ids).toEqual(library.encode('abcab').ids);
  });

  it('are the library’s from a packed vocabulary and merges: repeated tokens, merges that need escaping, odd spaces', async () => {
    const json = awkwardJson(false);
    const model = json.model as { vocab: Record<string, number>; merges: string[] };
    const byId: string[] = [];
    for (const [token, id] of Object.entries(model.vocab)) byId[id] = token;
    // Repeats: a later id whose token is an earlier one's, and a merge listed twice (the later rank wins).
    const tokens = [...byId, 'ab', '😀'];
    const merges = [...model.merges, 'a b', 'a b c'];
    const packed = {
      ...json,
      model: packedBpeModel(
        { tokens: PackedStrings.of(tokens), merges: PackedStrings.of(merges) },
        { unkToken: '"' },
      ),
    };
    // The library's construction of the same vocabulary and merges as plain JSON.
    const plain = {
      ...json,
      model: bpeModel(packed.model.vocab as Record<string, number>, merges, { unkToken: '"' }),
    };
    for (const inSteps of [false, true]) {
      const library = new HfTokenizer(plain, {});
      const ours = new HfTokenizer(withoutBpeTables(packed, plainBpeModel(packed)!), {});
      const tables = inSteps
        ? await buildBpeTablesInSteps(plainBpeModel(packed)!)
        : buildBpeTables(plainBpeModel(packed)!);
      expect(installBpeTables(ours, tables, [{ id: 3, content: '<x>' }])).toBe(true);
      installBpeTables(library, buildBpeTables(plainBpeModel(plain)!), [{ id: 3, content: '<x>' }]);
      expectSameTables(library, ours);
      for (const text of ['ab"\\\t\u0001é😀', 'b"a\\', '<x>ab', '😀😀é', 'abc ab']) {
        expect(ours.encode(text).ids).toEqual(library.encode(text).ids);
        const ids = library.encode(text).ids;
        if (ids.length > 0) expect(ours.decode(ids)).toBe(library.decode(ids));
      }
    }
  });

  it('ranks a packed merge list of many merges without a space (their own JSON keys) as the library does', async () => {
    const tokens = ['a', 'b', 'ab', 'ba'];
    // 60k merges with no space, then the two that apply: a scan per merge for its space would be quadratic.
    const merges = [...Array.from({ length: 60000 }, (_, i) => `x${i}`), 'a b', 'b a'];
    const json = withModel(
      packedBpeModel({ tokens: PackedStrings.of(tokens), merges: PackedStrings.of(merges) }),
    );
    const model = plainBpeModel(json)!;
    const ours = new HfTokenizer(withoutBpeTables(json, model), {});
    expect(installBpeTables(ours, buildBpeTables(model), [])).toBe(true);
    const library = new HfTokenizer({ ...json, model: bpeModel(model.vocab, merges) }, {});
    expectSameTables(library, ours);
    expect(ours.encode('abab ba').ids).toEqual(library.encode('abab ba').ids);
  });

  describe.each(TEST_VOCABULARIES.map((v) => [v.name, v] as const))('%s', (_name, vocabulary) => {
    it('are the library’s, from tokenizer.json and from its GGUF layout, and encode every text as it does', async () => {
      const source = await readHuggingFaceTokenizer(vocabulary.dir);
      const metadata = new Map(ggufVocabulary(source, vocabulary.pre ? { pre: vocabulary.pre } : {}));
      const gguf = ggufTokenizerSource(metadata, 'model.gguf').tokenizer;
      const corpus = tokenizerCorpus(7, 150);
      for (const json of [source.tokenizer, gguf]) {
        const { library, ours } = await bothWays(json);
        expectSameTables(library, ours);
        const differ = corpus.filter((text) => {
          const ids = library.encode(text).ids;
          return (
            JSON.stringify(ours.encode(text).ids) !== JSON.stringify(ids) ||
            (ids.length > 0 && ours.decode(ids) !== library.decode(ids))
          );
        });
        expect(differ.slice(0, 3)).toEqual([]);
      }
    });

    it('Tokenizer.create makes the constructor’s tokenizer', async () => {
      const source = await readHuggingFaceTokenizer(vocabulary.dir);
      const made = new Tokenizer(source);
      const created = await Tokenizer.create(source);
      expect(created.vocabSize).toBe(made.vocabSize);
      expect(created.eosTokenIds).toEqual(made.eosTokenIds);
      for (const text of tokenizerCorpus(11, 60)) {
        const ids = made.encode(text);
        expect(created.encode(text)).toEqual(ids);
        expect(created.decode(ids)).toBe(made.decode(ids));
      }
    });
  });

  describe('read from a GGUF file', () => {
    afterEach(() => vi.restoreAllMocks());

    it.each(TEST_VOCABULARIES.filter((v) => v.pre).map((v) => [v.name, v] as const))(
      '%s: builds its tables without making the vocabulary or merges, and encodes as its tokenizer.json does',
      async (name, vocabulary) => {
        const source = await readHuggingFaceTokenizer(vocabulary.dir);
        const dir = await mkdtemp(join(tmpdir(), 'rayo-packed-bpe-'));
        try {
          const path = join(dir, `${name}.gguf`);
          await writeGgufFile(path, {
            metadata: ggufVocabulary(source, { pre: vocabulary.pre! }),
            tensors: [],
          });
          const file = await GgufFile.open(await openNodeFile(path));
          const toArray = vi.spyOn(PackedStrings.prototype, 'toArray');
          const fromGguf = await Tokenizer.create(ggufTokenizerSource(file.metadata, path));
          await file.close();
          const fromJson = new Tokenizer(source);
          expect(fromGguf.vocabSize).toBe(fromJson.vocabSize);
          const differ = tokenizerCorpus(13, 120).filter((text) => {
            const ids = fromJson.encode(text);
            return (
              JSON.stringify(fromGguf.encode(text)) !== JSON.stringify(ids) ||
              fromGguf.decode(ids) !== fromJson.decode(ids)
            );
          });
          expect(differ.slice(0, 3)).toEqual([]);
          for (let id = 0; id < fromJson.vocabSize; id += 97)
            expect(fromGguf.idToToken(id)).toBe(fromJson.idToToken(id));
          expect(toArray).not.toHaveBeenCalled();
        } finally {
          await rm(dir, { recursive: true, force: true });
        }
      },
    );
  });
});
