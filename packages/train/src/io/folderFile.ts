import { InvalidArgumentError } from '@rayo/core';
import { type OpenFile, openNodeFile } from '../checkpoint/randomAccessFile.js';

/**
 * The real folders a file of `folder` may resolve to: the folder itself and,
 * where it is a Hugging Face cache snapshot (`<repo>/snapshots/<revision>`,
 * whose files are links to `<repo>/blobs/<hash>`), that repository's blobs.
 */
async function allowedRoots(folder: string): Promise<string[]> {
  const { realpath } = await import('node:fs/promises');
  const { basename, dirname, join } = await import('node:path');
  const real = await realpath(folder);
  const parent = dirname(real);
  return basename(parent) === 'snapshots' ? [real, join(dirname(parent), 'blobs')] : [real];
}

/**
 * Opens files of one folder (Node) as `openNodeFile` does, refusing a file
 * whose symbolic links lead out of the folder (other than a Hugging Face
 * cache snapshot's links to its blobs). A path that does not resolve is left
 * to `openNodeFile`, whose error names it.
 */
export function openNodeFileWithin(folder: string, api: string): OpenFile {
  let roots: Promise<string[]> | undefined;
  return async (path) => {
    const { realpath } = await import('node:fs/promises');
    const { isAbsolute, relative, sep } = await import('node:path');
    let real: string | undefined;
    try {
      roots ??= allowedRoots(folder);
      real = await realpath(path);
    } catch {
      roots = undefined;
      return openNodeFile(path);
    }
    const within = (await roots).some((root) => {
      const rel = relative(root, real);
      return rel !== '' && rel.split(sep)[0] !== '..' && !isAbsolute(rel);
    });
    if (!within) {
      throw new InvalidArgumentError('a file of the checkpoint folder links outside it', {
        operation: api,
        argument: path,
        expected: 'a file within the folder (links allowed within it, or to its Hugging Face cache blobs)',
        actual: `a link to ${real}`,
      });
    }
    return openNodeFile(path);
  };
}
