import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { CORE_VERSION } from './version.js';

describe('CORE_VERSION', () => {
  it("is package.json's version (run `pnpm version-packages` after a version bump)", () => {
    const manifest = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8'));
    expect(CORE_VERSION).toBe(manifest.version);
  });
});
