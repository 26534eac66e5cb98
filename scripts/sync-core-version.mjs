// Sets the version @rayo/core reports about itself (src/version.ts) to its
// package.json version: run after `changeset version` (`pnpm version-packages`).
import { readFileSync, writeFileSync } from 'node:fs';

const manifest = new URL('../packages/core/package.json', import.meta.url);
const source = new URL('../packages/core/src/version.ts', import.meta.url);
const { version } = JSON.parse(readFileSync(manifest, 'utf8'));
const text = readFileSync(source, 'utf8');
const updated = text.replace(/CORE_VERSION = '[^']*'/, `CORE_VERSION = '${version}'`);
if (updated === text && !text.includes(`'${version}'`)) throw new Error(`no CORE_VERSION in ${source}`);
writeFileSync(source, updated);
