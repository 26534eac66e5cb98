import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vitest/config';
import workspace from '../../../../vitest.config.js';

// The wgpu test files (but the browser suite, whose page runs the same WGSL
// in Chromium) and the generator sweep, with the recording setup file.
const pkg = join(dirname(fileURLToPath(import.meta.url)), '..', '..');

export default defineConfig({
  resolve: workspace.resolve,
  test: {
    root: pkg,
    include: ['src/**/*.test.ts', 'scripts/wgsl-capture/sweep.capture.ts'],
    exclude: ['src/browser.test.ts', '**/node_modules/**'],
    setupFiles: ['scripts/wgsl-capture/record.ts'],
    maxWorkers: 2,
    testTimeout: 600_000,
    hookTimeout: 600_000,
  },
});
