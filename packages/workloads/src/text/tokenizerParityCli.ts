import { mkdir, writeFile } from 'node:fs/promises';
import { dirname } from 'node:path';
import { parseArgs } from 'node:util';
import { PARITY_VOCABULARIES, vocabularyFolder } from './parityVocabularies.js';
import { tokenizerParity } from './tokenizerParity.js';

// tokenizer-parity: encodes and decodes a seeded corpus (code, many scripts,
// emoji, whitespace runs, special tokens) with each vocabulary through
// @rayo/text, through the GGUF layout of the same vocabulary, and through
// @lenml/tokenizers for comparison, and writes everything to JSON, which
// baseline/tokenizer_parity.py compares with transformers string for string.

const USAGE = `Usage: tokenizer-parity --vocabularies DIR [--out FILE] [--count N] [--seed N]

  --vocabularies DIR   a folder with one subfolder per vocabulary (${PARITY_VOCABULARIES.map((v) => v.name).join(', ')}),
                       each holding tokenizer.json and tokenizer_config.json
                       (default: tokenizers/ beside this program, as a bundle has it,
                       else the models/ folders of the packages that ship them)
  --out FILE           where the JSON goes (default tokenizer-parity.json)
  --count N            strings per vocabulary (default 2000)
  --seed N             the corpus seed (default 1)

Then: python tokenizer_parity.py FILE --vocabularies DIR`;

async function main(argv: readonly string[]): Promise<number> {
  const { values } = parseArgs({
    args: [...argv],
    options: {
      vocabularies: { type: 'string' },
      out: { type: 'string', default: 'tokenizer-parity.json' },
      count: { type: 'string', default: '2000' },
      seed: { type: 'string', default: '1' },
      help: { type: 'boolean' },
    },
  });
  if (values.help) {
    console.log(USAGE);
    return 0;
  }
  const count = Number(values.count);
  const seed = Number(values.seed);
  const results = [];
  for (const vocabulary of PARITY_VOCABULARIES) {
    const result = await tokenizerParity(
      vocabulary,
      vocabularyFolder(vocabulary, values.vocabularies),
      seed,
      count,
    );
    const mb = result.characters / 1e6;
    console.log(
      `${vocabulary.name}: ${result.strings.length} strings, ${result.chats.length} chats; encode ` +
        `rayo ${(mb / (result.encodeMs.rayo / 1000)).toFixed(2)} M chars/s, ` +
        `@lenml/tokenizers ${(mb / (result.encodeMs.lenml / 1000)).toFixed(2)} M chars/s`,
    );
    results.push(result);
  }
  await mkdir(dirname(values.out), { recursive: true });
  await writeFile(values.out, JSON.stringify({ seed, count, vocabularies: results }));
  console.log(`wrote ${values.out}`);
  return 0;
}

process.exitCode = await main(process.argv.slice(2));
