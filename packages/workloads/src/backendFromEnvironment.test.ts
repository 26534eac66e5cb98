import { afterEach, describe, expect, it, vi } from 'vitest';
import { environmentOptionsNote } from './backendFromEnvironment.js';

describe('environmentOptionsNote', () => {
  afterEach(() => {
    vi.unstubAllEnvs();
  });

  it('names the options the environment sets for a backend, and nothing when it sets none', async () => {
    vi.stubEnv('RAYO_QGEMV_ACTIVATIONS', '');
    vi.stubEnv('RAYO_QGEMV_VARIANT', '');
    expect(await environmentOptionsNote('cuda')).toBe('');
    vi.stubEnv('RAYO_QGEMV_ACTIVATIONS', 'int8');
    vi.stubEnv('RAYO_QGEMV_VARIANT', 'b');
    expect((await environmentOptionsNote('cuda')).split(', ').sort()).toEqual([
      'qgemvActivations int8',
      'qgemvVariant b',
    ]);
  });
});
