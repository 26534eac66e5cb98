import { PassThrough } from 'node:stream';
import { writeTinyTextModel } from '@rayo/text-testkit';
import { describe, expect, it } from 'vitest';
import type { CliIo } from './io.js';
import { openModel } from './openModel.js';

function io(env: Record<string, string>): CliIo {
  return {
    stdin: new PassThrough(),
    stdout: new PassThrough(),
    stderr: new PassThrough(),
    onInterrupt: () => () => {},
    env,
  };
}

describe('openModel', () => {
  it("takes the backend's tuning switches from the environment, refusing one that names no choice", async () => {
    const options = { model: 'nowhere.gguf', backend: 'cuda', quiet: true, stop: [] };
    await expect(openModel(options, io({ RAYO_QGEMV_ACTIVATIONS: 'int4' }))).rejects.toThrow(
      /RAYO_QGEMV_ACTIVATIONS/,
    );
  });

  it('passes --activations to the quantized projections, and --quant quantizes them', async () => {
    const model = await writeTinyTextModel();
    for (const activations of [undefined, 'exact'] as const) {
      const options = {
        model,
        backend: 'cpu',
        quiet: true,
        stop: [],
        quant: 'q8' as const,
        ...(activations ? { activations } : {}),
      };
      const { backend, model: text } = await openModel(options, io({}));
      try {
        expect(text.model.quantization?.format).toBe('q8');
        expect(text.model.quantizedActivations).toBe(activations ?? 'int8');
      } finally {
        text.dispose();
        backend.dispose();
      }
    }
  });
});
