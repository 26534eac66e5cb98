import type { RandomAccessFile } from '@rayo/train';

/** An in-memory file whose reads are recorded. */
export function memoryFile(
  bytes: Uint8Array,
  reads: { position: number; length: number }[] = [],
): RandomAccessFile {
  return {
    name: 'memory.gguf',
    size: bytes.length,
    async read(into, position) {
      if (position < 0 || position + into.length > bytes.length)
        throw new RangeError('read outside the file');
      reads.push({ position, length: into.length });
      into.set(bytes.subarray(position, position + into.length));
    },
    close: async () => {},
  };
}
