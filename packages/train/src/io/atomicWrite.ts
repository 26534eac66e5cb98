import { fileError } from './fileError.js';

/** Suffix of the file a save writes before it renames it over its target. */
export const PARTIAL_SUFFIX = '.partial';

/**
 * Writes `pieces` to `path` atomically: into `<path>.partial`, flushed to the
 * disk (fsync), then renamed over `path`, so that an interrupted or failed
 * save leaves the previous file whole. On failure the partial file is
 * removed and the error is a RayoError naming the file (a full disk's
 * ENOSPC as much as an invalid piece thrown while the pieces are made).
 */
export async function writeFileAtomically(
  path: string,
  pieces: Uint8Array | Iterable<Uint8Array>,
  api: string,
): Promise<void> {
  const { open, rename, rm } = await import('node:fs/promises');
  const partial = `${path}${PARTIAL_SUFFIX}`;
  try {
    const handle = await open(partial, 'w');
    try {
      for (const piece of pieces instanceof Uint8Array ? [pieces] : pieces) {
        let done = 0;
        while (done < piece.length)
          done += (await handle.write(piece, done, piece.length - done)).bytesWritten;
      }
      await handle.sync();
    } finally {
      await handle.close();
    }
    await rename(partial, path);
  } catch (error) {
    await rm(partial, { force: true }).catch(() => undefined);
    throw fileError(api, path, 'could not write the file', 'a writable file on a disk with room', error);
  }
  await syncFolderOf(path);
}

/** Flushes the folder's entry of a renamed file where the platform allows it (not on Windows). */
async function syncFolderOf(path: string): Promise<void> {
  const { open } = await import('node:fs/promises');
  const { dirname } = await import('node:path');
  try {
    const folder = await open(dirname(path), 'r');
    try {
      await folder.sync();
    } finally {
      await folder.close();
    }
  } catch {
    // The file is written and renamed; a folder that cannot be flushed changes nothing for the reader.
  }
}
