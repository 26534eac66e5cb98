import { RayoError } from '@rayo/core';

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

/** A file through a Node file handle (reads at offsets; the file is never held in memory). */
export const openNodeFile: OpenFile = async (path) => {
  const { open } = await import('node:fs/promises');
  const handle = await open(path, 'r');
  const { size } = await handle.stat();
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
        const { bytesRead } = await handle.read(into, done, into.length - done, position + done);
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
