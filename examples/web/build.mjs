// Builds the demo pages into dist/: index.html and main.js, one bundle of
// src/main.ts and the rayo packages it imports; chat.html with chat.js and
// chat-worker.js (the model's worker, `@rayo/web/worker`). `node build.mjs`
// writes them; serve dist/ with any static file server and open them in a
// WebGPU browser.
import { copyFile, mkdir, writeFile } from 'node:fs/promises';
import { basename } from 'node:path';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';

const here = (path) => fileURLToPath(new URL(path, import.meta.url));

/** How every script of the pages is bundled: for browsers, as ES modules, kept in memory. */
const FOR_BROWSERS = {
  bundle: true,
  write: false,
  format: 'esm',
  platform: 'browser',
  target: 'es2023',
  // The Node-only paths of the packages (Dawn for Node, finding backend
  // packages on disk) are never taken where navigator.gpu exists.
  external: ['webgpu', 'node:*'],
  logLevel: 'warning',
};

/** The demo page's script, bundled for browsers, as text. */
export async function bundleDemo() {
  const result = await build({ ...FOR_BROWSERS, entryPoints: [here('./src/main.ts')] });
  return result.outputFiles[0].text;
}

/**
 * The chat page's scripts by file name: the page's (chat.js), its model
 * worker's (chat-worker.js) and the chunks they share. Split into chunks, a
 * module that core imports dynamically (its cpu backend) is a chunk of its
 * own rather than a lazily initialised part of one bundle, whose
 * initialisation esbuild drops where a bundle reaches it only through
 * re-exports of a package without side effects (the page's script then threw
 * at its first `class … extends RayoError`).
 */
export async function bundleChat() {
  const result = await build({
    ...FOR_BROWSERS,
    entryPoints: { chat: here('./src/chat.ts'), 'chat-worker': '@rayo/web/worker' },
    // The worker entry is a package name: resolved from this example's dependencies, whatever the cwd.
    absWorkingDir: here('.'),
    outdir: here('./dist'),
    splitting: true,
  });
  return Object.fromEntries(result.outputFiles.map((file) => [basename(file.path), file.text]));
}

export const INDEX_HTML = here('./index.html');
export const CHAT_HTML = here('./chat.html');

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  await mkdir(here('./dist'), { recursive: true });
  await writeFile(here('./dist/main.js'), await bundleDemo());
  await copyFile(INDEX_HTML, here('./dist/index.html'));
  for (const [name, text] of Object.entries(await bundleChat()))
    await writeFile(here(`./dist/${name}`), text);
  await copyFile(CHAT_HTML, here('./dist/chat.html'));
  console.log('wrote dist/: index.html, main.js, chat.html, chat.js, chat-worker.js and their chunks');
}
