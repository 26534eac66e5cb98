import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { probeBackends } from '@rayo/core';
import {
  checkQuantizedDecode,
  LLAMA_CPP_MIXES,
  type LlamaCppMix,
  q4kmTestConfig,
  writeLlamaCppMix,
} from '@rayo/train';
import { createBackendFromEnvironment } from '../backendFromEnvironment.js';

// gguf-check: the done-when check of the GGUF formats on every backend
// there is. It writes a small Llama in llama.cpp's Q4_K_M or Q5_K_M mix
// (Q4_K or Q5_K projections and token embedding; Q6_K head and V / down of
// the layers llama.cpp picks) with the repo's GGUF writer, loads it with its
// weights repacked onto core's quantized formats (q4k or q5k, q6k),
// decodes greedily, and compares the tokens and logits with the same file
// dequantized by the reference and decoded in f32 on the cpu backend.

const MIXES = Object.keys(LLAMA_CPP_MIXES) as LlamaCppMix[];

const USAGE = `Usage: gguf-check [--backends LIST] [--mix LIST] [--layers N] [--tokens N] [--seed N] [--kv-dtype C]

Writes a GGUF Llama in each mix (hidden 256, FFN 512, vocab 96), decodes it on each
backend with quantized weights, and checks the greedy tokens against the file
dequantized by the reference in f32 on the cpu backend. Exits 1 on a mismatch.

  --backends LIST   rayo backends (default cuda,wgpu,cpu)
  --mix LIST        llama.cpp's mixes, of ${MIXES.join(', ')} (default all)
  --layers N        decoder layers (default 8: Q6_K in layers 0, 3, 6 and 7)
  --tokens N        tokens to generate (default 16)
  --seed N          weights (default 31)
  --kv-dtype C      f32 (default) or default: the KV cache the model keeps by default on the
                    backend (f16 where every matrix is quantized), the reference keeping the same`;

async function main(argv: readonly string[]): Promise<number> {
  if (argv.includes('--help')) {
    console.log(USAGE);
    return 0;
  }
  const { values } = parseArgs({
    args: [...argv],
    options: {
      backends: { type: 'string', default: 'cuda,wgpu,cpu' },
      mix: { type: 'string', default: MIXES.join(',') },
      layers: { type: 'string', default: '8' },
      tokens: { type: 'string', default: '16' },
      seed: { type: 'string', default: '31' },
      'kv-dtype': { type: 'string', default: 'f32' },
    },
  });
  const cache = values['kv-dtype'];
  if (cache !== 'f32' && cache !== 'default')
    throw new Error(`--kv-dtype takes f32 or default, got ${cache}`);
  const [layers, tokens, seed] = [values.layers, values.tokens, values.seed].map(Number) as [
    number,
    number,
    number,
  ];
  const mixes = values.mix.split(',').filter(Boolean);
  const unknown = mixes.find((m) => !(MIXES as string[]).includes(m));
  if (unknown !== undefined) throw new Error(`--mix takes ${MIXES.join(', ')}, got ${unknown}`);
  const dir = await mkdtemp(join(tmpdir(), 'gguf-check-'));
  let failed = false;
  try {
    for (const [mix, tied] of (mixes as LlamaCppMix[]).flatMap((m) =>
      [false, true].map((t) => [m, t] as const),
    )) {
      const config = q4kmTestConfig({ layers, tied });
      const path = join(dir, `${mix}-${tied ? 'tied' : 'untied'}.gguf`);
      const types = await writeLlamaCppMix(path, config, mix, seed);
      const counts = [...types.values()].reduce<Record<string, number>>((n, t) => {
        n[t] = (n[t] ?? 0) + 1;
        return n;
      }, {});
      console.log(
        `${mix} file, ${layers} layers, ${tied ? 'tied' : 'untied'} head: ${JSON.stringify(counts)}`,
      );
      for (const status of await probeBackends(values.backends.split(',').filter(Boolean))) {
        if (!status.available) {
          console.log(`  ${status.name}: unavailable (${status.reason ?? 'unavailable'})`);
          continue;
        }
        const backend = await createBackendFromEnvironment(status.name);
        try {
          const r = await checkQuantizedDecode(backend, path, {
            prompt: [5, 17, 3, 60, 0, 42, 8],
            maxNewTokens: tokens,
            cache,
          });
          const same =
            r.tokens.length === r.referenceTokens.length &&
            r.tokens.every((t, i) => t === r.referenceTokens[i]);
          const close = r.maxLogitError <= 1e-4 * Math.max(1, r.maxLogit);
          const ok = same && close && r.denseMatrices.length === 0;
          failed ||= !ok;
          console.log(
            `  ${status.name} (${backend.info.device}, ${r.kvCacheDtypes.model} cache): ${ok ? 'PASS' : 'FAIL'} tokens ${JSON.stringify(r.tokens)}` +
              `${same ? '' : ` reference ${JSON.stringify(r.referenceTokens)}`}; max logit error ${r.maxLogitError.toExponential(2)}` +
              ` of max |logit| ${r.maxLogit.toFixed(2)}${r.denseMatrices.length ? `; dense: ${r.denseMatrices.join(', ')}` : ''}`,
          );
        } catch (error) {
          failed = true;
          console.log(`  ${status.name}: FAIL ${error instanceof Error ? error.message : String(error)}`);
        } finally {
          backend.dispose();
        }
      }
    }
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
  return failed ? 1 : 0;
}

process.exitCode = await main(process.argv.slice(2));
