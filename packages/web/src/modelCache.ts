import { RayoError } from '@rayo/core';
import {
  checkIntegerAtLeast,
  FileSystemError,
  type OpenFile,
  type RandomAccessFile,
  type UrlFileOptions,
  urlFileOpener,
} from '@rayo/train';
import type { ShaderText } from '@rayo/wgpu';
import { isNotFound, type OpfsDirectory, opfsRoot, readJson, writeJson } from './opfs.js';
import { OpfsPreparedWeights, preparedBytes, removePrepared } from './preparedStore.js';

// Models are kept in the origin-private file system (OPFS), not in Cache
// Storage: Cache Storage keeps whole responses (it refuses the 206 answers of
// range requests) and gives them back as a body read from the start, while
// an OPFS file is written piece by piece as the ranges arrive (memory stays at
// one piece) and read back at any offset through `File.slice`, as the
// loaders read.

/** The folder of the origin's private file system that holds the cached models. */
export const MODEL_CACHE_FOLDER = 'rayo-models';
const MANIFEST = 'manifest.json';
/** The shaders the model's kernels compiled last time, for `precompile` on the next load. */
const SHADERS = 'shaders.json';
/** Bytes per range request while a file is copied into the cache. */
const DEFAULT_CHUNK_BYTES = 8 * 2 ** 20;
const KERNEL = 'ModelCache';

/** A model in the cache: the URL it was loaded from and the files kept of it. */
export interface CachedModel {
  readonly url: string;
  readonly files: readonly { readonly url: string; readonly bytes: number }[];
  /** Files the server did not have (an optional tokenizer file, say): not asked for again. */
  readonly absent: readonly string[];
  readonly bytes: number;
  /** Bytes of a GGUF model's tensors kept in their device layout (see `prepared`); 0 where none are. */
  readonly preparedBytes: number;
  /** When the last file was added (ISO 8601). */
  readonly savedAt: string;
}

interface Manifest {
  url: string;
  savedAt: string;
  /** Size of every cached file, by its URL. */
  files: Record<string, number>;
  absent: string[];
}

export interface CachedOpenerOptions extends UrlFileOptions {
  /** Bytes per range request when a file is first copied in (default 8 MiB): the memory a copy takes. */
  readonly chunkBytes?: number;
}

/** Hex SHA-256 of a URL: an OPFS entry name of any URL, of fixed length. */
async function keyOf(url: string): Promise<string> {
  const digest = await crypto.subtle.digest('SHA-256', new TextEncoder().encode(url));
  return [...new Uint8Array(digest)].map((b) => b.toString(16).padStart(2, '0')).join('');
}

/** A cached file read at offsets through `Blob.slice` (only the range read is in memory). */
function blobFile(url: string, blob: Blob): RandomAccessFile {
  return {
    name: url,
    size: blob.size,
    async read(into, position) {
      if (position < 0 || position + into.length > blob.size) {
        throw new RayoError('read outside the file', {
          operation: 'readCachedFile',
          argument: url,
          expected: `a range within ${blob.size} bytes`,
          actual: `[${position}, ${position + into.length})`,
        });
      }
      into.set(new Uint8Array(await blob.slice(position, position + into.length).arrayBuffer()));
    },
    close: async () => {},
  };
}

function absentError(url: string): FileSystemError {
  return new FileSystemError('no file at the URL (remembered by the model cache)', 'ENOENT', {
    operation: KERNEL,
    argument: url,
    expected: 'a file the server had',
    actual: 'HTTP 404 when the model was first loaded',
  });
}

/**
 * Models loaded from URLs, kept in the browser's origin-private file system
 * so that a second load asks the network for nothing: `opener(modelUrl)` is
 * an `OpenFile` for `TextModel.load` that copies each file in (by range
 * requests, `chunkBytes` at a time) the first time it is opened and reads it
 * from the cache after. A file the server lacked (404) is remembered as
 * absent. Cached files are not revalidated: `evict` a model to fetch it anew.
 */
export class ModelCache {
  readonly #folder: OpfsDirectory;

  private constructor(folder: OpfsDirectory) {
    this.#folder = folder;
  }

  /** The cache in `root` (default: this origin's OPFS root, in a page or a worker). */
  static async open(root?: OpfsDirectory): Promise<ModelCache> {
    const base = root ?? (await opfsRoot());
    if (!base) {
      throw new RayoError('no origin-private file system here', {
        operation: KERNEL,
        argument: 'root',
        expected: 'navigator.storage.getDirectory() (a browser page or worker in a secure context)',
        actual: 'absent',
      });
    }
    return new ModelCache(await base.getDirectoryHandle(MODEL_CACHE_FOLDER, { create: true }));
  }

  #manifest(folder: OpfsDirectory): Promise<Manifest | undefined> {
    return readJson<Manifest>(folder, MANIFEST);
  }

  async #save(folder: OpfsDirectory, manifest: Manifest): Promise<void> {
    manifest.savedAt = new Date().toISOString();
    await writeJson(folder, MANIFEST, manifest);
  }

  /** The model's folder of the cache, or undefined where the model is not cached. */
  async #cachedFolder(modelUrl: string): Promise<OpfsDirectory | undefined> {
    try {
      const folder = await this.#folder.getDirectoryHandle(await keyOf(modelUrl));
      return (await this.#manifest(folder)) ? folder : undefined;
    } catch (error) {
      if (isNotFound(error)) return undefined;
      throw error;
    }
  }

  /**
   * Keeps, beside a cached model, the shaders its kernels compiled (a
   * backend's `pipelines.compiledShaders()`), so that the next load can
   * compile them ahead, while the weights load. Nothing is kept for a model
   * not in the cache.
   */
  async saveShaders(modelUrl: string, shaders: readonly ShaderText[]): Promise<void> {
    const folder = await this.#cachedFolder(modelUrl);
    if (folder) await writeJson(folder, SHADERS, shaders);
  }

  /** The shaders `saveShaders` kept for the model, or undefined. */
  async shaders(modelUrl: string): Promise<ShaderText[] | undefined> {
    const folder = await this.#cachedFolder(modelUrl);
    return folder && readJson<ShaderText[]>(folder, SHADERS);
  }

  /**
   * Where a load of the GGUF file at `modelUrl` (through this cache's
   * `opener`) keeps its quantized tensors in their device layout, for
   * `TextModel.load`'s `prepared`: the first load writes them beside the
   * cached file, later loads read and upload them as they are. They are
   * used only for the file they were made from (its URL, size and a hash of
   * its header); damaged ones are a `PreparedDataError` naming the file.
   * Where the file is cached already, the first tensors' reads are begun
   * before this resolves, to go on while the load makes its device and
   * parses the header.
   */
  async prepared(modelUrl: string): Promise<OpfsPreparedWeights> {
    const key = await keyOf(modelUrl);
    const folder = await this.#folder.getDirectoryHandle(key, { create: true });
    const store = new OpfsPreparedWeights(folder, key, modelUrl);
    // A file cached already: its first tensors are read while the device is made and the header parsed.
    if ((await this.#manifest(folder))?.files[modelUrl] !== undefined) await store.readAhead();
    return store;
  }

  /** Removes the prepared tensors of the model at `modelUrl` (the next load makes them anew). */
  async removePrepared(modelUrl: string): Promise<void> {
    const folder = await this.#cachedFolder(modelUrl);
    if (folder) await removePrepared(folder);
  }

  /**
   * An `OpenFile` for the files of the model at `modelUrl` (a folder URL or a
   * `.gguf` URL): cached files are read from the cache, others are fetched by
   * range requests (`options` as `urlFileOpener`'s; `onBytes` counts the
   * bytes copied in) and kept.
   */
  async opener(modelUrl: string, options: CachedOpenerOptions = {}): Promise<OpenFile> {
    const chunkBytes = options.chunkBytes ?? DEFAULT_CHUNK_BYTES;
    checkIntegerAtLeast(KERNEL, 'chunkBytes', chunkBytes, 1, 'chunkBytes must be a positive integer');
    const folder = await this.#folder.getDirectoryHandle(await keyOf(modelUrl), { create: true });
    const manifest: Manifest = (await this.#manifest(folder)) ?? {
      url: modelUrl,
      savedAt: '',
      files: {},
      absent: [],
    };
    const remote = urlFileOpener(options);
    return async (url) => {
      if (manifest.absent.includes(url)) throw absentError(url);
      const key = await keyOf(url);
      const size = manifest.files[url];
      if (size !== undefined) {
        const blob = await (await folder.getFileHandle(key)).getFile().catch(() => undefined);
        if (blob?.size === size) return blobFile(url, blob);
        // A file lost or cut short (storage cleared under us): fetched again below.
        delete manifest.files[url];
      }
      let source: RandomAccessFile;
      try {
        source = await remote(url);
      } catch (error) {
        if (error instanceof FileSystemError && error.code === 'ENOENT') {
          manifest.absent.push(url);
          if (Object.keys(manifest.files).length > 0) await this.#save(folder, manifest);
        }
        throw error;
      }
      try {
        // Tensors prepared from an earlier copy of the file are not this one's.
        await removePrepared(folder);
        await copyIn(source, folder, key, chunkBytes);
      } finally {
        await source.close();
      }
      manifest.files[url] = source.size;
      await this.#save(folder, manifest);
      return blobFile(url, await (await folder.getFileHandle(key)).getFile());
    };
  }

  /** The models in the cache, with their files and bytes. */
  async list(): Promise<CachedModel[]> {
    const models: CachedModel[] = [];
    for await (const name of this.#folder.keys()) {
      const folder = await this.#folder.getDirectoryHandle(name).catch(() => undefined);
      const manifest = folder && (await this.#manifest(folder));
      if (!manifest) continue;
      const files = Object.entries(manifest.files).map(([url, bytes]) => ({ url, bytes }));
      models.push({
        url: manifest.url,
        files,
        absent: [...manifest.absent],
        bytes: files.reduce((sum, f) => sum + f.bytes, 0),
        preparedBytes: await preparedBytes(folder),
        savedAt: manifest.savedAt,
      });
    }
    return models.sort((a, b) => a.url.localeCompare(b.url));
  }

  /** Removes the model loaded from `modelUrl`, its files and prepared tensors; false where it was not cached. */
  async evict(modelUrl: string): Promise<boolean> {
    try {
      await this.#folder.removeEntry(await keyOf(modelUrl), { recursive: true });
      return true;
    } catch (error) {
      if (isNotFound(error)) return false;
      throw error;
    }
  }
}

/** Copies `source` into the file `key` of `folder`, `chunkBytes` per read; the file appears whole or not at all. */
async function copyIn(
  source: RandomAccessFile,
  folder: OpfsDirectory,
  key: string,
  chunkBytes: number,
): Promise<void> {
  const writable = await (await folder.getFileHandle(key, { create: true })).createWritable({
    keepExistingData: false,
  });
  try {
    const chunk = new Uint8Array(Math.min(chunkBytes, Math.max(source.size, 1)));
    for (let position = 0; position < source.size; position += chunk.length) {
      const piece = chunk.subarray(0, Math.min(chunk.length, source.size - position));
      await source.read(piece, position);
      await writable.write({ type: 'write', position, data: piece });
    }
  } catch (error) {
    await writable.abort().catch(() => {});
    throw error;
  }
  // A writable's data replaces the file's only on close.
  await writable.close();
}
