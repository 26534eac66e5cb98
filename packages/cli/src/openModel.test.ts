import { PassThrough } from 'node:stream';
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
});
