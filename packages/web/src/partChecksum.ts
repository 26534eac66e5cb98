import {
  PART_CHECKSUM_BLOCK_BYTES as CHUNK_BYTES,
  PART_CHECKSUM_PRIME as FNV_PRIME,
  PART_CHECKSUM_LANES as LANES,
  partChecksumBlocks,
  partChecksumBlockWord,
  partChecksumLanes,
  partChecksumOfBlocks,
  partChecksumReference as partChecksumScalar,
} from '@rayo/core';

// The checksum of prepared parts (core's `partChecksumReference`), on
// WebAssembly SIMD: thirty-two lanes are eight 128-bit vectors, run at
// several GB/s, where scalar JavaScript ran a fourth of that (it was most
// of a cached load's host time). The reference is the fallback where
// WebAssembly SIMD is missing.

export { partChecksumScalar };

/** Bytes of one step of every lane. */
const BLOCK_BYTES = LANES * 4;

/** Words `[from, to)` of `words` into `lanes`, word i into lane i mod 32. */
function scalarSteps(lanes: Uint32Array, words: Uint32Array, from: number, to: number): void {
  for (let i = from; i < to; i++) {
    const j = i & (LANES - 1);
    lanes[j] = Math.imul(lanes[j]! ^ words[i]!, FNV_PRIME);
  }
}

/** `view` as bytes and as its whole words (a copy where it does not start on a word). */
function wordsOf(view: ArrayBufferView): { bytes: Uint8Array; words: Uint32Array } {
  const bytes = new Uint8Array(view.buffer, view.byteOffset, view.byteLength);
  const aligned = bytes.byteOffset % 4 === 0 ? bytes : bytes.slice();
  return {
    bytes: aligned,
    words: new Uint32Array(aligned.buffer, aligned.byteOffset, aligned.byteLength >>> 2),
  };
}

// The WebAssembly module, assembled here (it is a few hundred bytes):
// `hash(at, blocks)` runs `blocks` steps of the 32 lanes over the 128-byte
// blocks from `at`, the lanes kept as eight v128 in memory[0, 128).
const leb = (n: number): number[] => {
  const out: number[] = [];
  do {
    let byte = n & 0x7f;
    n >>>= 7;
    if (n !== 0) byte |= 0x80;
    out.push(byte);
  } while (n !== 0);
  return out;
};
const section = (id: number, body: number[]) => [id, ...leb(body.length), ...body];
const name = (text: string) => [text.length, ...[...text].map((c) => c.charCodeAt(0))];
const I32 = 0x7f;
const V128 = 0x7b;
const op = {
  localGet: 0x20,
  localSet: 0x21,
  localTee: 0x22,
  i32Const: 0x41,
  i32Add: 0x6a,
  i32Sub: 0x6b,
  i32Eqz: 0x45,
  block: 0x02,
  loop: 0x03,
  brIf: 0x0d,
  end: 0x0b,
  void: 0x40,
} as const;
const simd = {
  load: [0xfd, 0x00],
  store: [0xfd, 0x0b],
  const: [0xfd, 0x0c],
  xor: [0xfd, 0x51],
  mulI32x4: [0xfd, 0xb5, 0x01],
} as const;

function checksumModuleBytes(): Uint8Array {
  const AT = 0;
  const BLOCKS = 1;
  const lane = (k: number) => 2 + k; // locals 2..9: the eight lane vectors
  const PRIME = 10;
  const vectors = BLOCK_BYTES / 16;
  const primeBytes = [...new Uint8Array(new Uint32Array(4).fill(FNV_PRIME).buffer)];
  const memarg = (offset: number) => [0, ...leb(offset)];
  const body: number[] = [1, 9, V128];
  body.push(...simd.const, ...primeBytes, op.localSet, PRIME);
  for (let k = 0; k < vectors; k++) {
    body.push(op.i32Const, 0, ...simd.load, ...memarg(16 * k), op.localSet, lane(k));
  }
  body.push(op.block, op.void, op.localGet, BLOCKS, op.i32Eqz, op.brIf, 0, op.loop, op.void);
  for (let k = 0; k < vectors; k++) {
    body.push(op.localGet, lane(k), op.localGet, AT, ...simd.load, ...memarg(16 * k), ...simd.xor);
    body.push(op.localGet, PRIME, ...simd.mulI32x4, op.localSet, lane(k));
  }
  body.push(op.localGet, AT, op.i32Const, ...[0x80, 0x01], op.i32Add, op.localSet, AT);
  body.push(op.localGet, BLOCKS, op.i32Const, 1, op.i32Sub, op.localTee, BLOCKS, op.brIf, 0);
  body.push(op.end, op.end);
  for (let k = 0; k < vectors; k++) {
    body.push(op.i32Const, 0, op.localGet, lane(k), ...simd.store, ...memarg(16 * k));
  }
  body.push(op.end);
  return new Uint8Array([
    ...[0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00],
    ...section(1, [1, 0x60, 2, I32, I32, 0]),
    ...section(3, [1, 0]),
    ...section(5, [1, 0, 1]),
    ...section(7, [2, ...name('memory'), 2, 0, ...name('hash'), 0, 0]),
    ...section(10, [1, ...leb(body.length), ...body]),
  ]);
}

/** The few members of WebAssembly used here (the type libraries this package builds with do not declare it). */
declare const WebAssembly:
  | {
      validate(bytes: Uint8Array): boolean;
      Module: new (bytes: Uint8Array) => object;
      Instance: new (module: object) => { readonly exports: object };
    }
  | undefined;

interface ChecksumModule {
  readonly memory: { readonly buffer: ArrayBuffer; grow(pages: number): number };
  readonly hash: (at: number, blocks: number) => void;
}

let simdModule: ChecksumModule | null | undefined;

/** The SIMD module, made at the first use; null where WebAssembly SIMD is missing. */
function simdChecksum(): ChecksumModule | null {
  if (simdModule !== undefined) return simdModule;
  try {
    const bytes = checksumModuleBytes();
    if (typeof WebAssembly === 'undefined' || !WebAssembly.validate(bytes)) {
      simdModule = null;
      return null;
    }
    const instance = new WebAssembly.Instance(new WebAssembly.Module(bytes));
    const exports = instance.exports as unknown as ChecksumModule;
    exports.memory.grow(Math.ceil((BLOCK_BYTES + CHUNK_BYTES) / 65536) - 1);
    simdModule = exports;
  } catch {
    simdModule = null;
  }
  return simdModule;
}

/** Whether `partChecksum` runs on WebAssembly SIMD here. */
export function partChecksumUsesSimd(): boolean {
  return simdChecksum() !== null;
}

/**
 * The checksum of a prepared part (the reference's value), computed on
 * WebAssembly SIMD where it can be: each 64 KiB block is copied into the
 * module's memory (few enough bytes to stay in the core's cache, so the
 * hash reads the copy from there, not from memory) and hashed there.
 */
export function partChecksum(view: ArrayBufferView): number {
  const module = simdChecksum();
  if (!module) return partChecksumScalar(view);
  const { bytes, words } = wordsOf(view);
  const memory = new Uint8Array(module.memory.buffer);
  const state = new Uint32Array(module.memory.buffer, 0, LANES);
  const blockWords = new Uint32Array(partChecksumBlocks(bytes.length));
  for (let b = 0; b < blockWords.length; b++) {
    const at = b * CHUNK_BYTES;
    const end = Math.min(bytes.length, at + CHUNK_BYTES);
    // The block's whole 128-byte steps in the module, then its last words and bytes here.
    const wordsEnd = Math.min(words.length, end >>> 2);
    const stepsEnd = at + Math.floor((wordsEnd * 4 - at) / BLOCK_BYTES) * BLOCK_BYTES;
    state.set(partChecksumLanes());
    if (stepsEnd > at) {
      memory.set(bytes.subarray(at, stepsEnd), BLOCK_BYTES);
      module.hash(BLOCK_BYTES, (stepsEnd - at) / BLOCK_BYTES);
    }
    const lanes = state.slice();
    // A block starts on a multiple of 32 words: word i is in lane i mod 32 of its block.
    scalarSteps(lanes, words, stepsEnd >>> 2, wordsEnd);
    blockWords[b] = partChecksumBlockWord(lanes, bytes.subarray(wordsEnd * 4, end), end - at);
  }
  return partChecksumOfBlocks(blockWords, bytes.length);
}
