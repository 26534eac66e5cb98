// Builds the demo page into dist/: index.html and main.js, one bundle of
// src/main.ts and the rayo packages it imports. `node build.mjs` writes it;
// serve dist/ with any static file server and open it in a WebGPU browser.
import { copyFile, mkdir, writeFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';

const here = (path) => fileURLToPath(new URL(path, import.meta.url));

/** The page's script, bundled for browsers, as text. */
export async function bundleDemo() {
  const result = await build({
    entryPoints: [here('./src/main.ts')],
    bundle: true,
    write: false,
    format: 'esm',
    platform: 'browser',
    target: 'es2023',
    // The Node-only paths of the packages (Dawn for Node, finding backend
    // packages on disk) are never taken where navigator.gpu exists.
    external: ['webgpu', 'node:*'],
    logLevel: 'warning',
  });
  return result.outputFiles[0].text;
}

export const INDEX_HTML = here('./index.html');

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  await mkdir(here('./dist'), { recursive: true });
  await writeFile(here('./dist/main.js'), await bundleDemo());
  await copyFile(INDEX_HTML, here('./dist/index.html'));
  console.log('wrote dist/index.html and dist/main.js');
}
