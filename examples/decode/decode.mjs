// Loads a Llama-family checkpoint in the Hugging Face layout and samples from
// it with the KV-cache decoder. With the names model of ../names/names.mjs
// (its vocab.json maps ids to characters) it makes up first names; with any
// other checkpoint it prints token ids (tokenising is the caller's).
//
//   node decode.mjs [--checkpoint DIR] [--backend wgpu|cpu|cuda] [--samples N] [--prompt 1,2,3]
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { exampleBackend } from '@rayo/example-shared/backend';
import { LlamaModel } from '@rayo/train';

const { values } = parseArgs({
  options: {
    checkpoint: { type: 'string', default: 'names-model' },
    backend: { type: 'string', default: 'wgpu' },
    samples: { type: 'string', default: '10' },
    prompt: { type: 'string', default: '0' },
    'max-new': { type: 'string', default: '20' },
  },
});
let chars;
try {
  chars = JSON.parse(await readFile(join(values.checkpoint, 'vocab.json'), 'utf8'));
} catch {
  chars = undefined; // not the names model: print ids
}
const prompt = values.prompt.split(',').map(Number);
const maxNewTokens = Number(values['max-new']);

const { backend, log } = await exampleBackend(values.backend);
let model;
try {
  model = await LlamaModel.load(backend, values.checkpoint, { maxSequence: prompt.length + maxNewTokens });
  log(`${values.checkpoint} on ${backend.name} (${backend.info.device})`);
  for (let n = 0; n < Number(values.samples); n++) {
    const tokens = [];
    // generate starts from an empty context; for the names model id 0 ('.') ends a name.
    for await (const token of model.generate(prompt, {
      maxNewTokens,
      temperature: 0.8,
      seed: n,
      stop: [0],
    })) {
      tokens.push(token);
    }
    log(chars ? tokens.map((t) => chars[t]).join('') : tokens.join(' '));
  }
} finally {
  model?.dispose();
  backend.dispose();
}
