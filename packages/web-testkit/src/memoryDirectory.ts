import type { OpfsDirectory, OpfsFileHandle } from '@rayo/web';

// The origin-private file system's few members the model cache uses, in
// memory, for @rayo/web's tests in Node (the real one is exercised in
// Chromium by the chat page's test).

/** A directory of the OPFS API in memory, with its DOMException names. */
export function memoryDirectory(name = ''): OpfsDirectory {
  const entries = new Map<string, OpfsDirectory | OpfsFileHandle>();
  const notFound = (entry: string) =>
    Object.assign(new Error(`${entry} not found`), { name: 'NotFoundError' });
  const fileHandle = (fileName: string): OpfsFileHandle => {
    let bytes = new Uint8Array(0);
    return {
      kind: 'file',
      name: fileName,
      getFile: async () => new Blob([bytes]),
      async createWritable(options) {
        let staged = options?.keepExistingData ? bytes.slice() : new Uint8Array(0);
        return {
          async write({ position, data }) {
            const grown = new Uint8Array(Math.max(staged.length, position + data.length));
            grown.set(staged);
            grown.set(data, position);
            staged = grown;
          },
          close: async () => {
            bytes = staged;
          },
          abort: async () => {},
        };
      },
    };
  };
  /** The entry `entry` of kind `kind`, made where `create` asks and it is not there. */
  const lookup = <T extends OpfsDirectory | OpfsFileHandle>(
    entry: string,
    kind: T['kind'],
    create: boolean | undefined,
    make: () => T,
  ): T => {
    const found = entries.get(entry);
    if (found?.kind === kind) return found as T;
    if (!create) throw notFound(entry);
    const made = make();
    entries.set(entry, made);
    return made;
  };
  return {
    kind: 'directory',
    name,
    getDirectoryHandle: async (entry, options) =>
      lookup(entry, 'directory', options?.create, () => memoryDirectory(entry)),
    getFileHandle: async (entry, options) => lookup(entry, 'file', options?.create, () => fileHandle(entry)),
    async removeEntry(entry) {
      if (!entries.delete(entry)) throw notFound(entry);
    },
    async *keys() {
      yield* entries.keys();
    },
  };
}
