import { GgufFile, openNodeFile } from '@rayo/train';
import { hashUnits, PackedKeyTable } from '../text/dist/tokenizer/packedKeyMap.js';

const path = '/tmp/wb/web-bench-models/llama-3.2-1b-q4_0-seed0.gguf';
const file = await GgufFile.open(await openNodeFile(path));
const merges = file.metadata.get('tokenizer.ggml.merges').packed;
const tokens = file.metadata.get('tokenizer.ggml.tokens').packed;
console.log('merges', merges.length, merges.text.length, 'tokens', tokens.length, tokens.text.length);
for (let r = 0; r < 5; r++) {
  let t = performance.now();
  let x = 0;
  for (let i = 0; i < merges.length; i++) x ^= hashUnits(merges.text, merges.start(i), merges.ends[i]);
  const th = performance.now() - t;
  t = performance.now();
  const text = merges.text;
  let y = 0;
  for (let i = 0; i < text.length; i++) y += text.charCodeAt(i);
  const tc = performance.now() - t;
  t = performance.now();
  const table = new PackedKeyTable(merges, merges.length);
  for (let i = 0; i < merges.length; i++)
    table.set(hashUnits(merges.text, merges.start(i), merges.ends[i]), i, undefined, i, true);
  const ts = performance.now() - t;
  console.log(`hash ${th.toFixed(1)} charCodeAt-loop ${tc.toFixed(1)} hash+set ${ts.toFixed(1)} ms`, x, y);
}
