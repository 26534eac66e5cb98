import { type Backend, type QuantizedHostWeight, type QuantizedWeight, RayoError } from '@rayo/core';
import type { PreparedWeights } from '@rayo/train';
import {
  type ChecksummingBackend,
  checksummingBackend,
  DevicePartChecks,
  type ExpectedChecksum,
} from './devicePartChecks.js';
import { isNotFound, type OpfsDirectory, type OpfsWritable, readJson, writeJson } from './opfs.js';
import { partChecksum } from './partChecksum.js';

// A GGUF model's quantized tensors in their device layout, kept beside the
// cached file so that a load from the cache reads and uploads them as they
// are (no stored blocks read, no repack). Two files in the model's folder:
// the parts one after another, and an index written only once they are all
// there, so a load cut short leaves no index and a later load rebuilds them.

/** The index of the prepared parts: what they were made from, and where each part lies. */
export const PREPARED_INDEX = 'prepared.json';
/** The prepared parts, one after another. */
export const PREPARED_DATA = 'prepared.bin';
/**
 * 5: checksums of 64 KiB blocks chained (core's `partChecksumReference`),
 * which a device computes at once. 4: 32-lane checksums, and Q6_K kept as
 * `q6k` (6.5625 bits per weight). 3: eight-lane checksums. 2: Q4_K kept as
 * `q4k` (4.5 bits per weight). Data of an older version is rebuilt once.
 */
const VERSION = 5;
const OPERATION = 'ModelCache.prepared';
/** Bytes of the GGUF file hashed for its identity: its header's start (metadata, tensor table). */
const HEAD_BYTES = 2 ** 20;
/** Tensors read ahead of the one being uploaded: reads of a few tensors in flight at once. */
const READ_AHEAD = 2;

type PartName = ExpectedChecksum['part'];
const PARTS: readonly PartName[] = ['packed', 'scales', 'zeros', 'offsets'];

interface PartEntry {
  readonly at: number;
  readonly bytes: number;
  readonly checksum: number;
}

interface TensorEntry {
  readonly format: QuantizedHostWeight['format'];
  readonly n: number;
  readonly k: number;
  readonly scaleDType: QuantizedHostWeight['scaleDType'];
  readonly parts: Partial<Record<PartName, PartEntry>>;
}

/** Which GGUF file the parts were made from: its URL, size and a hash of its head. */
interface SourceIdentity {
  readonly url: string;
  readonly bytes: number;
  readonly headSha256: string;
}

interface PreparedIndex {
  readonly version: number;
  readonly source: SourceIdentity;
  /** Size of the data file. */
  readonly bytes: number;
  readonly tensors: Record<string, TensorEntry>;
}

/** A tensor's parts as read, and the checksums kept for them (checked on the host or on the device). */
interface ReadParts {
  readonly weight: QuantizedHostWeight;
  readonly expected: readonly ExpectedChecksum[];
}

/** A prepared file that fails its checks: the load drops the prepared data and repacks from the GGUF file. */
export class PreparedDataError extends RayoError {
  override readonly name = 'PreparedDataError';
}

/**
 * Part `part` of a tensor read whole into `buffer`, as its typed array: a
 * view where it lies aligned to its element, else a copy (a u32 part after
 * an odd count of 16-bit scales).
 */
function typedPart(
  part: PartName,
  dtype: QuantizedHostWeight['scaleDType'],
  buffer: ArrayBuffer,
  offset: number,
  bytes: number,
) {
  const words = part === 'packed' || part === 'zeros';
  const width = words || dtype === 'f32' ? 4 : 2;
  const aligned = offset % width === 0 ? buffer : buffer.slice(offset, offset + bytes);
  const at = aligned === buffer ? offset : 0;
  if (words) return new Uint32Array(aligned, at, bytes / 4);
  return dtype === 'f32' ? new Float32Array(aligned, at, bytes / 4) : new Uint16Array(aligned, at, bytes / 2);
}

async function sha256Hex(bytes: ArrayBuffer): Promise<string> {
  const digest = await crypto.subtle.digest('SHA-256', bytes);
  return [...new Uint8Array(digest)].map((x) => x.toString(16).padStart(2, '0')).join('');
}

/** Removes a model's prepared data (both files); nothing where there is none. */
export async function removePrepared(folder: OpfsDirectory): Promise<void> {
  for (const name of [PREPARED_INDEX, PREPARED_DATA]) {
    await folder.removeEntry(name).catch((error: unknown) => {
      if (!isNotFound(error)) throw error;
    });
  }
}

/** The bytes of a model's prepared data, 0 where it has none (or none complete). */
export async function preparedBytes(folder: OpfsDirectory): Promise<number> {
  return (await readJson<PreparedIndex>(folder, PREPARED_INDEX))?.bytes ?? 0;
}

type State =
  | { readonly mode: 'read'; readonly index: PreparedIndex; readonly data: Blob }
  | {
      mode: 'write';
      readonly source: SourceIdentity;
      writable?: OpfsWritable;
      index: PreparedIndex;
      failed?: unknown;
    };

/**
 * `PreparedWeights` in a model's folder of the cache, for the GGUF file
 * cached there as `fileKey` (fetched from `url`). Kept parts are used only
 * where they were made from that file (its URL, size and head hash) and pass
 * their checks (sizes, checksums); where none are kept, the load's repacked
 * parts are written, and kept once the load ends well. A failing write (a
 * full quota) drops them: the load itself goes on.
 */
export class OpfsPreparedWeights implements PreparedWeights {
  readonly #folder: OpfsDirectory;
  readonly #fileKey: string;
  readonly #url: string;
  #state: Promise<State> | undefined;
  /** The next tensors' parts, being read while the loader checks and uploads this one. */
  #ahead: { readonly name: string; readonly parts: Promise<ReadParts> }[] = [];
  /** Where set, parts are checked on this backend's device once uploaded, not on the host before. */
  #device: ChecksummingBackend | undefined;
  /** Tensors read for the device, waiting for their upload, with their parts' kept checksums. */
  readonly #unchecked = new Map<string, readonly ExpectedChecksum[]>();
  readonly #checks = new DevicePartChecks();
  /** Tensors read from the prepared data by this load. */
  reused = 0;
  /** Tensors written to it by this load. */
  written = 0;

  constructor(folder: OpfsDirectory, fileKey: string, url: string) {
    this.#folder = folder;
    this.#fileKey = fileKey;
    this.#url = url;
  }

  /**
   * Checks the parts read from here on `backend`'s device once they are
   * uploaded (`uploaded`), where it computes part checksums (wgpu); else, or
   * before this is called, on the host as they are read. Returns whether it
   * will.
   */
  checkOnDevice(backend: Backend): boolean {
    this.#device = checksummingBackend(backend);
    return this.#device !== undefined;
  }

  /** What the cached file's prepared data says; read once, at the first tensor (the file is cached by then). */
  #open(): Promise<State> {
    this.#state ??= this.#opened();
    return this.#state;
  }

  async #opened(): Promise<State> {
    const file = await (await this.#folder.getFileHandle(this.#fileKey)).getFile();
    const head = await file.slice(0, Math.min(file.size, HEAD_BYTES)).arrayBuffer();
    const source = { url: this.#url, bytes: file.size, headSha256: await sha256Hex(head) };
    const index = await readJson<PreparedIndex>(this.#folder, PREPARED_INDEX);
    const same =
      index?.version === VERSION &&
      index.source.url === source.url &&
      index.source.bytes === source.bytes &&
      index.source.headSha256 === source.headSha256;
    const empty = { version: VERSION, source, bytes: 0, tensors: {} };
    if (!index || !same) return { mode: 'write', source, index: empty };
    const data = await (await this.#folder.getFileHandle(PREPARED_DATA)).getFile().catch((error) => {
      if (isNotFound(error)) return undefined;
      throw error;
    });
    if (data?.size !== index.bytes) {
      throw this.#refuse(PREPARED_DATA, `${index.bytes} bytes`, `${data?.size ?? 'no file of'} bytes`);
    }
    return { mode: 'read', index, data };
  }

  /**
   * Begins reading the first tensors now, for a model whose file is cached
   * already, so that they are read while its header is parsed (the first,
   * the embedding, is the largest). Only data this store would read is
   * kept; otherwise, or on any failure, nothing changes and the first
   * `read` opens the data as it would have. Resolves once the reads are
   * begun (or not); never rejects.
   */
  readAhead(): Promise<void> {
    if (this.#state) return Promise.resolve();
    return this.#opened().then(
      (state) => {
        if (state.mode !== 'read' || this.#state) return;
        this.#state = Promise.resolve(state);
        const names = Object.keys(state.index.tensors).slice(0, 1 + READ_AHEAD);
        this.#ahead = names.map((name) => this.#readAhead(state, name));
      },
      // Met again, and reported, by the first read.
      () => {},
    );
  }

  /** Tensor `name` being read; its failure, if any, is met when it is asked for. */
  #readAhead(state: Extract<State, { mode: 'read' }>, name: string) {
    const parts = this.#readParts(state.index, state.data, name);
    parts.catch(() => {});
    return { name, parts };
  }

  #refuse(argument: string, expected: string, actual: string): PreparedDataError {
    return new PreparedDataError(`the prepared weights of ${this.#url} are damaged`, {
      operation: OPERATION,
      argument: `${PREPARED_DATA} (${argument})`,
      expected,
      actual,
    });
  }

  /** A tensor's parts, read with one slice of the data (they lie one after another), their sizes checked. */
  async #readParts(index: PreparedIndex, data: Blob, name: string): Promise<ReadParts> {
    const entry = index.tensors[name]!;
    const kept = PARTS.flatMap((part) => {
      const at = entry.parts[part];
      return at ? [{ part, ...at }] : [];
    });
    const start = Math.min(...kept.map((p) => p.at));
    const end = Math.max(...kept.map((p) => p.at + p.bytes));
    const buffer = kept.length > 0 ? await data.slice(start, end).arrayBuffer() : new ArrayBuffer(0);
    const parts: Partial<Record<PartName, Uint32Array | Float32Array | Uint16Array>> = {};
    const expected: ExpectedChecksum[] = [];
    for (const { part, at, bytes, checksum } of kept) {
      const what = `${name}.${part}`;
      const available = Math.max(0, Math.min(bytes, buffer.byteLength - (at - start)));
      if (available !== bytes) throw this.#refuse(what, `${bytes} bytes`, `${available}`);
      parts[part] = typedPart(part, entry.scaleDType, buffer, at - start, bytes);
      expected.push({ part, checksum });
    }
    const { packed, scales, zeros, offsets } = parts;
    if (!packed || !scales)
      throw this.#refuse(name, 'packed and scales parts', Object.keys(parts).join(', '));
    const weight: QuantizedHostWeight = {
      format: entry.format,
      n: entry.n,
      k: entry.k,
      scaleDType: entry.scaleDType,
      packed: packed as Uint32Array,
      scales,
      ...(zeros ? { zeros: zeros as Uint32Array } : {}),
      ...(offsets ? { offsets } : {}),
    };
    return { weight, expected };
  }

  async read(name: string): Promise<QuantizedHostWeight | undefined> {
    const state = await this.#open();
    if (state.mode !== 'read' || !(name in state.index.tensors)) return undefined;
    // Tensors were written in load order: the next ones are read while this one is checked and uploaded.
    const names = Object.keys(state.index.tensors);
    const at = names.indexOf(name);
    const ahead = new Map(this.#ahead.map((r) => [r.name, r]));
    const wanted = names.slice(at, at + 1 + READ_AHEAD);
    this.#ahead = wanted.map((next) => ahead.get(next) ?? this.#readAhead(state, next));
    const { weight, expected } = await this.#ahead.shift()!.parts;
    if (this.#device) this.#unchecked.set(name, expected);
    else {
      for (const { part, checksum } of expected) {
        const actual = partChecksum(weight[part]!);
        if (actual !== checksum) throw this.#refuse(`${name}.${part}`, `checksum ${checksum}`, `${actual}`);
      }
    }
    this.reused++;
    return weight;
  }

  uploaded(name: string, weight: QuantizedWeight): void {
    const expected = this.#unchecked.get(name);
    if (!expected || !this.#device) return;
    this.#unchecked.delete(name);
    this.#checks.check(this.#device, name, weight, expected);
  }

  async write(name: string, weight: QuantizedHostWeight): Promise<void> {
    const state = await this.#open();
    if (state.mode !== 'write' || state.failed !== undefined) return;
    try {
      if (!state.writable) {
        // An index from another file or an older layout goes before new parts are written.
        await removePrepared(this.#folder);
        const handle = await this.#folder.getFileHandle(PREPARED_DATA, { create: true });
        state.writable = await handle.createWritable({ keepExistingData: false });
      }
      const parts: Partial<Record<PartName, PartEntry>> = {};
      let at = state.index.bytes;
      for (const part of PARTS) {
        const array = weight[part];
        if (!array) continue;
        const bytes = new Uint8Array(array.buffer, array.byteOffset, array.byteLength);
        await state.writable.write({ type: 'write', position: at, data: bytes });
        parts[part] = { at, bytes: bytes.length, checksum: partChecksum(array) };
        at += bytes.length;
      }
      const { format, n, k, scaleDType } = weight;
      state.index = {
        ...state.index,
        bytes: at,
        tensors: { ...state.index.tensors, [name]: { format, n, k, scaleDType, parts } },
      };
      this.written++;
    } catch (error) {
      state.failed = error;
      await state.writable?.abort().catch(() => {});
    }
  }

  async end(complete: boolean): Promise<void> {
    this.#ahead = [];
    const mismatch = await this.#checks.settle(!complete).catch((error: unknown) => {
      if (complete) throw error;
      return undefined;
    });
    if (complete) {
      if (mismatch) throw this.#refuse(mismatch.what, `checksum ${mismatch.expected}`, `${mismatch.actual}`);
      const [unchecked] = this.#unchecked.keys();
      if (unchecked !== undefined) throw this.#refuse(unchecked, 'checked once uploaded', 'never uploaded');
    }
    const state = await this.#state;
    if (state?.mode !== 'write' || !state.writable) return;
    if (!complete || state.failed !== undefined) {
      if (state.failed === undefined) await state.writable.abort().catch(() => {});
      return;
    }
    try {
      await state.writable.close();
      await writeJson(this.#folder, PREPARED_INDEX, state.index);
    } catch {
      // Kept data is an optimisation: a load that cannot keep it still succeeds.
      await removePrepared(this.#folder).catch(() => {});
    }
  }
}
