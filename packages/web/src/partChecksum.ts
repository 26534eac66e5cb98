// The checksum of prepared parts: FNV-1a over 32-bit words in 32 interleaved
// lanes, word i into lane i mod 32. Each step, s = (s ^ word) · prime, is a
// bijection of the lane's state, so any one changed word changes its lane,
// and the lanes are folded through odd multipliers: it changes the checksum.
// Thirty-two lanes are eight 128-bit vectors: WebAssembly's SIMD runs them
// at several GB/s, where scalar JavaScript ran a fourth of that (it was most
// of a cached load's host time). The scalar form below is the reference and
// the fallback where WebAssembly SIMD is missing.

/** FNV-1a's prime: one multiply and one xor per word and lane. */
const FNV_PRIME = 0x01000193;
const LANES = 32;
/** Bytes of one step of every lane. */
const BLOCK_BYTES = LANES * 4;
/**
 * Bytes copied into the module's memory per call: few enough to stay in the
 * core's cache, so that the hash reads the copy from there, not from memory
 * (the data is read from memory once).
 */
const CHUNK_BYTES = 1 << 16;

function initialLanes(): Uint32Array {
  const lanes = new Uint32Array(LANES);
  for (let j = 0; j < LANES; j++) lanes[j] = Math.imul(0x811c9dc5 ^ j, FNV_PRIME);
  return lanes;
}

/** Words `[from, to)` of `words` into `lanes`, word i into lane i mod 32. */
function scalarSteps(lanes: Uint32Array, words: Uint32Array, from: number, to: number): void {
  for (let i = from; i < to; i++) {
    const j = i & (LANES - 1);
    lanes[j] = Math.imul(lanes[j]! ^ words[i]!, FNV_PRIME);
  }
}

/** The lanes, the trailing bytes (into lane 0) and the length, folded into one word. */
function finish(lanes: Uint32Array, tail: Uint8Array, byteLength: number): number {
  for (const byte of tail) lanes[0] = Math.imul(lanes[0]! ^ byte, FNV_PRIME);
  let h = byteLength >>> 0;
  for (let j = 0; j < LANES; j++) h = (h ^ Math.imul(lanes[j]!, 2 * j + 3)) >>> 0;
  return Math.imul(h ^ (h >>> 15), 0x2c1b3c6d) >>> 0;
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

/** The checksum computed in scalar JavaScript: the reference. */
export function partChecksumScalar(view: ArrayBufferView): number {
  const { bytes, words } = wordsOf(view);
  const lanes = initialLanes();
  scalarSteps(lanes, words, 0, words.length);
  return finish(lanes, bytes.subarray(words.length * 4), bytes.length);
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

/** The checksum of a prepared part (the scalar reference's value, computed on WebAssembly SIMD where it can be). */
export function partChecksum(view: ArrayBufferView): number {
  const module = simdChecksum();
  if (!module) return partChecksumScalar(view);
  const { bytes, words } = wordsOf(view);
  const memory = new Uint8Array(module.memory.buffer);
  const state = new Uint32Array(module.memory.buffer, 0, LANES);
  state.set(initialLanes());
  const whole = words.length - (words.length % LANES);
  for (let at = 0; at < whole * 4; at += CHUNK_BYTES) {
    const n = Math.min(CHUNK_BYTES, whole * 4 - at);
    memory.set(bytes.subarray(at, at + n), BLOCK_BYTES);
    module.hash(BLOCK_BYTES, n / BLOCK_BYTES);
  }
  const lanes = state.slice();
  scalarSteps(lanes, words, whole, words.length);
  return finish(lanes, bytes.subarray(words.length * 4), bytes.length);
}
