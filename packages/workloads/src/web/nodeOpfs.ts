import { openAsBlob } from 'node:fs';
import { copyFile, mkdir, open, readdir, rename, rm, rmdir, stat } from 'node:fs/promises';
import { join } from 'node:path';
import type { OpfsDirectory, OpfsFileHandle, OpfsWritable } from '@rayo/web';

// The origin-private file system's few members that @rayo/web's model cache
// uses, over a folder on disk, so that the browser path's cache runs in Node
// with real files: a file's Blob is `fs.openAsBlob` (read at offsets from
// disk, as a browser's OPFS File is), and a writable stages its bytes in a
// swap file beside the file that replaces it on close, as Chromium does.

/** A missing entry, as the browser's DOMException names it (what `isNotFound` checks). */
function notFound(path: string): Error {
  return Object.assign(new Error(`${path} not found`), { name: 'NotFoundError' });
}

/** A wrong kind of entry (a file asked for as a folder, or the reverse), as the browser names it. */
function typeMismatch(path: string): Error {
  return Object.assign(new Error(`${path} is not of the kind asked for`), { name: 'TypeMismatchError' });
}

/** Whether `path` is an entry of the `kind` asked for; false where there is none; throws where it has the other kind. */
async function exists(path: string, kind: 'file' | 'directory'): Promise<boolean> {
  const info = await stat(path).catch(() => undefined);
  if (!info) return false;
  if ((kind === 'file') !== info.isFile()) throw typeMismatch(path);
  return true;
}

/** Swap files are the writables' staging, not entries of the folder. */
const SWAP = '.crswap';

function fileHandle(path: string, name: string): OpfsFileHandle {
  return {
    kind: 'file',
    name,
    getFile: () => openAsBlob(path),
    async createWritable(options): Promise<OpfsWritable> {
      const swap = `${path}${SWAP}`;
      if (options?.keepExistingData) await copyFile(path, swap);
      const handle = await open(swap, options?.keepExistingData ? 'r+' : 'w');
      return {
        async write({ position, data }) {
          await handle.write(data, 0, data.length, position);
        },
        async close() {
          await handle.close();
          await rename(swap, path);
        },
        async abort() {
          await handle.close();
          await rm(swap, { force: true });
        },
      };
    },
  };
}

/** `OpfsDirectory` over the folder `path` (made if absent). */
export async function nodeOpfsDirectory(path: string, name = ''): Promise<OpfsDirectory> {
  await mkdir(path, { recursive: true });
  return directory(path, name);
}

function directory(path: string, name: string): OpfsDirectory {
  return {
    kind: 'directory',
    name,
    async getDirectoryHandle(entry, options) {
      const at = join(path, entry);
      if (!(await exists(at, 'directory'))) {
        if (!options?.create) throw notFound(at);
        await mkdir(at);
      }
      return directory(at, entry);
    },
    async getFileHandle(entry, options) {
      const at = join(path, entry);
      if (!(await exists(at, 'file'))) {
        if (!options?.create) throw notFound(at);
        await (await open(at, 'w')).close();
      }
      return fileHandle(at, entry);
    },
    async removeEntry(entry, options) {
      const at = join(path, entry);
      const info = await stat(at).catch(() => undefined);
      if (!info) throw notFound(at);
      // A folder with entries goes only when asked recursively, as in a browser.
      if (info.isDirectory() && !options?.recursive) await rmdir(at);
      else await rm(at, { recursive: true });
    },
    async *keys() {
      for (const entry of await readdir(path)) if (!entry.endsWith(SWAP)) yield entry;
    },
  };
}
