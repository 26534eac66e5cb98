import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { InvalidArgumentError } from '@rayo/core';
import { MISTRAL, TEST_VOCABULARIES } from '@rayo/text-testkit';
import { type GgufValue, writeGgufFile } from '@rayo/train';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { tokenizerCorpus } from '../../../workloads/src/text/corpus.js';
import { readHuggingFaceTokenizer } from '../tokenizer/huggingFaceFolder.js';
import { Tokenizer } from '../tokenizer/tokenizer.js';
import { ggufVocabulary } from './ggufVocabulary.js';
import { sentencePieceMerges } from './sentencePieceMerges.js';

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'rayo-gguf-vocab-'));
});
afterAll(() => rm(dir, { recursive: true, force: true }));

describe.each(TEST_VOCABULARIES.map((v) => [v.name, v] as const))(
  '%s as a GGUF vocabulary',
  (name, vocabulary) => {
    it('encodes and decodes as its tokenizer.json does (the Mistral one read back from a .gguf file)', async () => {
      const source = await readHuggingFaceTokenizer(vocabulary.dir);
      // A GGUF SentencePiece vocabulary encodes as SentencePiece and llama.cpp do: a ▁ before every
      // piece of text, even one that starts with a space. That is the pipeline the file saved;
      // transformers 5's LlamaTokenizer class (which the config names) differs there, so the GGUF
      // vocabulary is compared with the file's own pipeline.
      const { tokenizer_class: _class, ...saved } = source.config ?? {};
      const fromJson = new Tokenizer({ ...source, config: saved });
      const metadata = ggufVocabulary(source, vocabulary.pre ? { pre: vocabulary.pre } : {});
      let fromGguf: Tokenizer;
      if (name === MISTRAL.name) {
        // Through the file: the writer's and reader's view of every key (the larger vocabularies stay in memory).
        const path = join(dir, `${name}.gguf`);
        await writeGgufFile(path, { metadata, tensors: [] });
        fromGguf = await Tokenizer.load(path);
      } else {
        fromGguf = Tokenizer.fromGguf(new Map(metadata), `${name}.gguf`);
      }
      expect(fromGguf.vocabSize).toBe(fromJson.vocabSize);
      expect(fromGguf.bosTokenId).toBe(fromJson.bosTokenId);
      expect(fromGguf.eosTokenIds).toEqual(fromJson.eosTokenIds);
      expect(fromGguf.specialTokenIds).toEqual(fromJson.specialTokenIds);
      expect(fromGguf.chatTemplates.get('default')).toBe(fromJson.chatTemplates.get('default'));
      const specials = [...fromJson.specialTokenIds].slice(0, 6).map((id) => fromJson.idToToken(id)!);
      const differ: string[] = [];
      for (const text of tokenizerCorpus(23, 300, specials)) {
        for (const addSpecialTokens of [true, false]) {
          const a = fromJson.encode(text, { addSpecialTokens });
          const b = fromGguf.encode(text, { addSpecialTokens });
          if (JSON.stringify(a) !== JSON.stringify(b)) differ.push(`${JSON.stringify(text)}: ${a} ≠ ${b}`);
          const options = { skipSpecialTokens: true, cleanUpTokenizationSpaces: false };
          if (fromJson.decode(a, options) !== fromGguf.decode(a, options))
            differ.push(`decode ${JSON.stringify(text)}`);
        }
      }
      expect(differ.slice(0, 3)).toEqual([]);
    });
  },
);

describe('a GGUF vocabulary', () => {
  it("keeps tokens named as an object's own members ('toString', '__proto__') as tokens", () => {
    const tokens = ['<unk>', 'a', 'toString', '__proto__', 'constructor', 'hasOwnProperty'];
    const metadata = new Map<string, GgufValue>([
      ['tokenizer.ggml.model', { type: 'string', value: 'gpt2' }],
      ['tokenizer.ggml.tokens', { type: 'array', itemType: 'string', value: tokens }],
      ['tokenizer.ggml.merges', { type: 'array', itemType: 'string', value: [] }],
      ['tokenizer.ggml.pre', { type: 'string', value: 'gpt-2' }],
    ]);
    const tokenizer = Tokenizer.fromGguf(metadata);
    for (const [id, token] of tokens.entries()) {
      expect(tokenizer.idToToken(id)).toBe(token);
      expect(tokenizer.tokenToId(token)).toBe(id);
    }
  });
});

describe('SentencePiece merges from scores', () => {
  it("rebuild Mistral's file merges in the order of the pieces they make", async () => {
    const source = await readHuggingFaceTokenizer(MISTRAL.dir);
    const model = source.tokenizer.model as { vocab: Record<string, number>; merges: (string | string[])[] };
    const file = model.merges.map((m) => (typeof m === 'string' ? m : m.join(' ')));
    const tokens: string[] = [];
    for (const [t, id] of Object.entries(model.vocab)) tokens[id] = t;
    const rank = new Map<string, number>();
    file.forEach((m, i) => {
      if (!rank.has(m.replace(' ', ''))) rank.set(m.replace(' ', ''), i);
    });
    const normal = (id: number) => id >= 3 + 256;
    const scores = tokens.map((t, id) => (normal(id) ? -(rank.get(t) ?? file.length + id) : 0));
    const rebuilt = sentencePieceMerges(tokens, scores, normal).map(([a, b]) => `${a} ${b}`);
    const firsts = (list: string[]) => [...new Set(list.map((m) => m.replace(' ', '')))];
    expect(firsts(rebuilt)).toEqual(firsts(file));
    const rebuiltSet = new Set(rebuilt);
    expect(file.filter((m) => !rebuiltSet.has(m))).toEqual([]);
  });

  it('join the highest-scoring piece first, its splits ordered by their halves', () => {
    // "abc" (score -3) from "ab"+"c" (left half -2) and "a"+"bc" (left half -1): the higher left half first.
    const tokens = ['a', 'b', 'c', 'ab', 'abc', 'bc'];
    const scores = [-1, -1, -1.5, -2, -3, -5];
    expect(sentencePieceMerges(tokens, scores, (id) => id >= 3)).toEqual([
      ['a', 'b'],
      ['a', 'bc'],
      ['ab', 'c'],
      ['b', 'c'],
    ]);
  });
});

describe('Tokenizer.fromGguf errors', () => {
  const base = (entries: [string, GgufValue][]) => new Map<string, GgufValue>(entries);
  const tokens: [string, GgufValue] = [
    'tokenizer.ggml.tokens',
    { type: 'array', itemType: 'string', value: ['a', 'b'] },
  ];

  it('names a missing or unknown tokenizer model, and an unknown pre-tokenizer', () => {
    expect(() => Tokenizer.fromGguf(base([tokens]), 'x.gguf')).toThrow(InvalidArgumentError);
    expect(() => Tokenizer.fromGguf(base([tokens]), 'x.gguf')).toThrow(
      /'tokenizer\.ggml\.model': x\.gguf has no tokenizer/,
    );
    const bert: [string, GgufValue] = ['tokenizer.ggml.model', { type: 'string', value: 'bert' }];
    expect(() => Tokenizer.fromGguf(base([bert, tokens]))).toThrow(/'gpt2' \| 'llama'.*got 'bert'/);
    const gpt2: [string, GgufValue] = ['tokenizer.ggml.model', { type: 'string', value: 'gpt2' }];
    const merges: [string, GgufValue] = [
      'tokenizer.ggml.merges',
      { type: 'array', itemType: 'string', value: [] },
    ];
    const pre: [string, GgufValue] = ['tokenizer.ggml.pre', { type: 'string', value: 'deepseek-coder' }];
    expect(() => Tokenizer.fromGguf(base([gpt2, tokens, merges, pre]))).toThrow(
      /tokenizer\.ggml\.pre.*'llama-bpe' \| 'qwen2' \| 'gpt-2'.*got 'deepseek-coder'/,
    );
  });

  it('names token types, scores and ids that do not fit the tokens', () => {
    const llama: [string, GgufValue] = ['tokenizer.ggml.model', { type: 'string', value: 'llama' }];
    const types: [string, GgufValue] = [
      'tokenizer.ggml.token_type',
      { type: 'array', itemType: 'int32', value: [1] },
    ];
    expect(() => Tokenizer.fromGguf(base([llama, tokens, types]))).toThrow(/token_type.*2 types.*got 1/);
    expect(() => Tokenizer.fromGguf(base([llama, tokens]))).toThrow(
      /tokenizer\.ggml\.scores.*2 scores.*got absent/,
    );
    const bos: [string, GgufValue] = ['tokenizer.ggml.bos_token_id', { type: 'uint32', value: 7 }];
    expect(() => Tokenizer.fromGguf(base([llama, tokens, bos]))).toThrow(/bos_token_id.*\[0, 2\).*got 7/);
  });
});
