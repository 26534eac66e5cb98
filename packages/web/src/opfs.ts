// The few members of the origin-private file system (OPFS) the model cache
// uses, declared here so that the package type-checks without the DOM
// library (its Node tests and the workspace's single program have none).

export interface OpfsWritable {
  write(chunk: { type: 'write'; position: number; data: Uint8Array }): Promise<void>;
  close(): Promise<void>;
  abort(): Promise<void>;
}

export interface OpfsFileHandle {
  readonly kind: 'file';
  readonly name: string;
  getFile(): Promise<Blob>;
  createWritable(options?: { keepExistingData?: boolean }): Promise<OpfsWritable>;
}

export interface OpfsDirectory {
  readonly kind: 'directory';
  readonly name: string;
  getDirectoryHandle(name: string, options?: { create?: boolean }): Promise<OpfsDirectory>;
  getFileHandle(name: string, options?: { create?: boolean }): Promise<OpfsFileHandle>;
  removeEntry(name: string, options?: { recursive?: boolean }): Promise<void>;
  keys(): AsyncIterable<string>;
}

/** The root of this origin's private file system, or undefined where there is none (Node, old browsers). */
export async function opfsRoot(): Promise<OpfsDirectory | undefined> {
  // Through unknown: the DOM library's own declaration, where present, lacks the directory's keys().
  const storage = (
    globalThis as unknown as { navigator?: { storage?: { getDirectory?: () => Promise<OpfsDirectory> } } }
  ).navigator?.storage;
  return storage?.getDirectory ? storage.getDirectory() : undefined;
}

/** Whether `error` is the DOMException a missing OPFS entry throws. */
export function isNotFound(error: unknown): boolean {
  return (error as { name?: unknown } | null)?.name === 'NotFoundError';
}

/** The JSON file `name` of `folder`, parsed, or undefined where there is none. */
export async function readJson<T>(folder: OpfsDirectory, name: string): Promise<T | undefined> {
  try {
    const blob = await (await folder.getFileHandle(name)).getFile();
    return JSON.parse(await blob.text()) as T;
  } catch (error) {
    if (isNotFound(error)) return undefined;
    throw error;
  }
}

/** Writes `value` as the JSON file `name` of `folder`, replacing it whole. */
export async function writeJson(folder: OpfsDirectory, name: string, value: unknown): Promise<void> {
  const writable = await (await folder.getFileHandle(name, { create: true })).createWritable();
  await writable.write({ type: 'write', position: 0, data: new TextEncoder().encode(JSON.stringify(value)) });
  await writable.close();
}
