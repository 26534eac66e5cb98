import { openAsBlob } from 'node:fs';
import { copyFile, mkdir, open, readdir, rename, rm, rmdir, stat } from 'node:fs/promises';
import { join } from 'node:path';
import type { OpfsDirectory, OpfsFileHandle, OpfsWritable } from '@rayo/web';

// The origin-private file system's few members that @rayo/web's model cache
// uses, over a folder on disk, so that the browser path's cache runs in Node
// with real files: a file's Blob reads its slices from disk, as a browser's
// OPFS File does, and a writable stages its bytes in a swap file beside the
// file that replaces it on close, as Chromium does.

/**
 * How a file's Blob reads: `'fs'`, positioned reads of the slice asked for
 * (the speed of the disk and page cache); `'openAsBlob'`, Node's own
 * file-backed Blob, whose reads stream in small pieces and copy (0.1 to
 * 0.2 GB/s measured on Node 20, against several GB/s for positioned reads
 * of the same cached file), so that it times Node's Blob more than the cache.
 */
export type NodeBlobReads = 'fs' | 'openAsBlob';

/**
 * The members of a file's Blob the model cache uses (`size`, `slice`,
 * `arrayBuffer`, `text`), reading `[start, end)` of the file at `path` with
 * one positioned read when asked.
 */
class DiskSlice {
  readonly type = '';
  readonly #path: string;
  readonly #start: number;
  readonly size: number;

  constructor(path: string, start: number, end: number) {
    this.#path = path;
    this.#start = start;
    this.size = end - start;
  }

  /** As Blob.slice: offsets within this slice, clamped; no negative offsets (the cache uses none). */
  slice(start = 0, end = this.size): DiskSlice {
    const from = Math.min(Math.max(start, 0), this.size);
    const to = Math.min(Math.max(end, from), this.size);
    return new DiskSlice(this.#path, this.#start + from, this.#start + to);
  }

  async arrayBuffer(): Promise<ArrayBuffer> {
    // Memory of its own, not zeroed first (the read fills all of it, as a browser's read does).
    const bytes = Buffer.allocUnsafeSlow(this.size);
    const handle = await open(this.#path, 'r');
    try {
      for (let done = 0; done < bytes.length; ) {
        const { bytesRead } = await handle.read(bytes, done, bytes.length - done, this.#start + done);
        if (bytesRead === 0) throw new Error(`${this.#path}: the file ended before its slice did`);
        done += bytesRead;
      }
    } finally {
      await handle.close();
    }
    return bytes.buffer as ArrayBuffer;
  }

  async text(): Promise<string> {
    return new TextDecoder().decode(await this.arrayBuffer());
  }
}

async function blobOf(path: string, reads: NodeBlobReads): Promise<Blob> {
  if (reads === 'openAsBlob') return openAsBlob(path);
  // The model cache reads a file only through these members (see DiskSlice).
  return new DiskSlice(path, 0, (await stat(path)).size) as unknown as Blob;
}

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

function fileHandle(path: string, name: string, reads: NodeBlobReads): OpfsFileHandle {
  return {
    kind: 'file',
    name,
    getFile: () => blobOf(path, reads),
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

/** `OpfsDirectory` over the folder `path` (made if absent), its files' Blobs read as `reads` says (default `'fs'`). */
export async function nodeOpfsDirectory(path: string, reads: NodeBlobReads = 'fs'): Promise<OpfsDirectory> {
  await mkdir(path, { recursive: true });
  return directory(path, '', reads);
}

function directory(path: string, name: string, reads: NodeBlobReads): OpfsDirectory {
  return {
    kind: 'directory',
    name,
    async getDirectoryHandle(entry, options) {
      const at = join(path, entry);
      if (!(await exists(at, 'directory'))) {
        if (!options?.create) throw notFound(at);
        await mkdir(at);
      }
      return directory(at, entry, reads);
    },
    async getFileHandle(entry, options) {
      const at = join(path, entry);
      if (!(await exists(at, 'file'))) {
        if (!options?.create) throw notFound(at);
        await (await open(at, 'w')).close();
      }
      return fileHandle(at, entry, reads);
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
