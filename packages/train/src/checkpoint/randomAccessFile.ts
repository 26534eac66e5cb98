import { InvalidArgumentError, RayoError } from '@rayo/core';
import { fileError } from '../io/fileError.js';

/** A file read at offsets, never as a whole: what the streaming loaders need from a file system. */
export interface RandomAccessFile {
  /** A name for error messages (the path). */
  readonly name: string;
  readonly size: number;
  /** Fills `into` with the bytes at `position`; the range must lie within the file. */
  read(into: Uint8Array, position: number): Promise<void>;
  close(): Promise<void>;
}

export type OpenFile = (path: string) => Promise<RandomAccessFile>;

const KERNEL = 'openFile';

/** A path Node can open: a non-empty string without NUL bytes (else an InvalidArgumentError, not Node's TypeError). */
export function checkPathText(path: string, api = KERNEL): void {
  if (typeof path !== 'string' || path.length === 0 || path.includes('\0')) {
    throw new InvalidArgumentError('not a usable file path', {
      operation: api,
      argument: 'path',
      expected: 'a non-empty path without NUL bytes',
      actual: JSON.stringify(path),
    });
  }
}

/** What a non-regular file is, for the error that refuses it. */
function kindOf(stats: import('node:fs').Stats): string {
  if (stats.isDirectory()) return 'a folder';
  if (stats.isFIFO()) return 'a FIFO';
  if (stats.isSocket()) return 'a socket';
  if (stats.isCharacterDevice() || stats.isBlockDevice()) return 'a device';
  return 'not a regular file';
}

/**
 * A regular file through a Node file handle (reads at offsets; the file is
 * never held in memory). Symbolic links are followed. A FIFO, device, socket
 * or folder is refused without blocking (the file is opened non-blocking,
 * then checked), and every failure is a RayoError naming the path.
 */
export const openNodeFile: OpenFile = async (path) => {
  checkPathText(path);
  const { open, constants } = await import('node:fs/promises');
  let handle: import('node:fs/promises').FileHandle;
  try {
    // Non-blocking, so that opening a FIFO with no writer returns instead of waiting for one.
    handle = await open(path, constants.O_RDONLY | (constants.O_NONBLOCK ?? 0));
  } catch (error) {
    throw fileError(KERNEL, path, 'could not open the file', 'a readable regular file', error);
  }
  let size: number;
  try {
    const stats = await handle.stat();
    if (!stats.isFile()) {
      throw new InvalidArgumentError('not a regular file', {
        operation: KERNEL,
        argument: path,
        expected: 'a regular file (or a link to one)',
        actual: kindOf(stats),
      });
    }
    size = stats.size;
  } catch (error) {
    await handle.close();
    throw fileError(KERNEL, path, 'could not read the file', 'a readable regular file', error);
  }
  return {
    name: path,
    size,
    async read(into, position) {
      if (position < 0 || position + into.length > size) {
        throw new RayoError('read outside the file', {
          operation: 'readFile',
          argument: path,
          expected: `a range within ${size} bytes`,
          actual: `[${position}, ${position + into.length})`,
        });
      }
      // A read may return fewer bytes than asked (and the OS caps one read near 2 GiB).
      let done = 0;
      while (done < into.length) {
        let bytesRead: number;
        try {
          ({ bytesRead } = await handle.read(into, done, into.length - done, position + done));
        } catch (error) {
          throw fileError(
            'readFile',
            path,
            'could not read the file',
            `${into.length} bytes at ${position}`,
            error,
          );
        }
        if (bytesRead === 0) {
          throw new RayoError('the file ended early', {
            operation: 'readFile',
            argument: path,
            expected: `${into.length} bytes at ${position}`,
            actual: `${done}`,
          });
        }
        done += bytesRead;
      }
    },
    close: () => handle.close(),
  };
};

/**
 * The whole of a file of at most `maxBytes` bytes, closed afterwards; a
 * larger file is refused before anything is allocated.
 */
export async function readWholeFile(
  file: RandomAccessFile,
  maxBytes: number,
  api = 'readFile',
): Promise<Uint8Array> {
  try {
    if (file.size > maxBytes) {
      throw new InvalidArgumentError('the file is larger than this reader takes', {
        operation: api,
        argument: file.name,
        expected: `at most ${maxBytes} bytes`,
        actual: `${file.size} bytes`,
      });
    }
    const bytes = new Uint8Array(file.size);
    await file.read(bytes, 0);
    return bytes;
  } finally {
    await file.close();
  }
}
