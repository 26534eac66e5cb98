import {
  ModelScope,
  modelTestBackends,
  removeTinyLlamas,
  tinyLlamaConfig,
  tinyLlamaWeights,
  writeTinyLlama,
} from '@rayo/train-testkit';
import { afterAll, describe, expect, it } from 'vitest';
import { LlamaModel } from './model.js';

// Projections (and the head) quantized on load through quantizeRows give the
// host quantizer's bits: the same logits exactly. On the cpu backend the
// device path runs the spec's reference; on wgpu (Mesa lavapipe in CI), the
// shader.

const config = tinyLlamaConfig({ tie_word_embeddings: false });
const prompt = [3, 14, 15, 92, 65, 35];
const dir = await writeTinyLlama(config, tinyLlamaWeights(config, 8));
afterAll(removeTinyLlamas);

describe.each(await modelTestBackends())('weights quantized on load on %s', (_name, create) => {
  const scope = new ModelScope(create);
  afterAll(() => scope.dispose());
  for (const format of ['q8', 'q4g32', 'q8g16', 'q4g32a'] as const) {
    it(`${format}: the device path gives the host path's logits`, async () => {
      const backend = await scope.backend();
      using host = await LlamaModel.load(backend, dir, {
        weightFormat: format,
        quantizeHead: true,
        quantizeOn: 'host',
      });
      using device = await LlamaModel.load(backend, dir, {
        weightFormat: format,
        quantizeHead: true,
        quantizeOn: 'device',
      });
      expect(device.quantization).toMatchObject({ path: 'device', format });
      expect(device.quantization!.rmsRelativeError).toBeUndefined();
      expect(host.quantization!.rmsRelativeError).toBeGreaterThan(0);
      expect(device.quantization!.quantizedBytes).toBe(host.quantization!.quantizedBytes);
      using want = host.prefill(prompt);
      using got = device.prefill(prompt);
      expect(await got.read()).toEqual(await want.read());
    });
  }
});
