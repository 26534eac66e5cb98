import { execFileSync } from 'node:child_process';
import { mkdir, open, symlink, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';

/** What a case is refused by: a reader opened as a user would open the file, resolving only if it accepts it. */
export interface HostileReader {
  readonly name: string;
  /** Whether its refusals can name the file (a reader of bytes already in memory cannot). */
  readonly namesFile: boolean;
  read(path: string): Promise<void>;
}

/** One hostile file (or folder) and the reader that must refuse it. */
export interface HostileCase {
  /** The case class, e.g. `safetensors: truncated`. */
  readonly kind: string;
  readonly name: string;
  readonly reader: HostileReader;
  /** Writes the case into `dir` (its own empty folder); returns the path handed to the reader. */
  write(dir: string): Promise<string>;
  /** What the refusal must say besides the file's name (the field, the reason). */
  readonly mentions?: RegExp;
}

/**
 * The case maker of one file format: each case writes its bytes to `fileName`
 * for `reader`, its kind prefixed with `format` (`gguf: truncated`).
 */
export function singleFileCases(format: string, fileName: string, reader: HostileReader) {
  return (kind: string, name: string, bytes: () => Uint8Array, mentions?: RegExp): HostileCase => ({
    kind: `${format}: ${kind}`,
    name,
    reader,
    mentions,
    write: (dir) => put(dir, fileName, bytes()),
  });
}

/** Little-endian bytes, appended one value at a time (for hand-made binary headers). */
export class LittleEndianBytes {
  readonly #bytes: number[] = [];

  u8(v: number): this {
    this.#bytes.push(v & 0xff);
    return this;
  }
  u32(v: number): this {
    for (let i = 0; i < 4; i++) this.#bytes.push((v >>> (8 * i)) & 0xff);
    return this;
  }
  u64(v: number | bigint): this {
    const big = BigInt.asUintN(64, BigInt(v));
    for (let i = 0n; i < 8n; i++) this.#bytes.push(Number((big >> (8n * i)) & 0xffn));
    return this;
  }
  raw(bytes: Uint8Array | readonly number[]): this {
    for (const b of bytes) this.#bytes.push(b);
    return this;
  }
  /** A u64 byte length, then the UTF-8 bytes. */
  string(s: string): this {
    const utf8 = new TextEncoder().encode(s);
    return this.u64(utf8.length).raw(utf8);
  }
  zeros(n: number): this {
    for (let i = 0; i < n; i++) this.#bytes.push(0);
    return this;
  }
  get length(): number {
    return this.#bytes.length;
  }
  done(): Uint8Array {
    return Uint8Array.from(this.#bytes);
  }
}

/** Writes `bytes` (or text) to `dir/name`, creating folders; returns the path. */
export async function put(dir: string, name: string, bytes: Uint8Array | string): Promise<string> {
  const path = join(dir, name);
  await mkdir(dirname(path), { recursive: true });
  await writeFile(path, bytes);
  return path;
}

/** A FIFO at `dir/name` (no writer ever opens it: a reader that opens it blocking would wait for ever). */
export async function fifo(dir: string, name: string): Promise<string> {
  const path = join(dir, name);
  await mkdir(dirname(path), { recursive: true });
  execFileSync('mkfifo', [path]);
  return path;
}

/** A sparse file of `size` bytes (zeros, taking no disk space): a size check must refuse it unread. */
export async function sparse(dir: string, name: string, size: number): Promise<string> {
  const path = join(dir, name);
  await mkdir(dirname(path), { recursive: true });
  const handle = await open(path, 'w');
  await handle.truncate(size);
  await handle.close();
  return path;
}

/** A symbolic link at `dir/name` to `target`. */
export async function link(dir: string, name: string, target: string): Promise<string> {
  const path = join(dir, name);
  await mkdir(dirname(path), { recursive: true });
  await symlink(target, path);
  return path;
}
