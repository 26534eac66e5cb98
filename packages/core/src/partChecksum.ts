// The checksum of a kept byte range (a model cache's prepared weights). The
// bytes are cut into blocks of 64 KiB; each block is hashed with FNV-1a over
// its 32-bit little-endian words in 32 interleaved lanes (word i of the
// block into lane i mod 32; the bytes after the last whole word into lane 0
// one at a time), its lanes folded with its length into one word; the block
// words are chained by FNV-1a and folded with the whole length. Each step,
// s = (s ^ word) · prime, is a bijection of the state, and lanes are folded
// through odd multipliers: any one changed word changes the checksum.
// Blocks are independent, so a device hashes them all at once and the host
// chains a few thousand words. Declared here once: the host's fast form
// (WebAssembly SIMD) and a device's kernel compute exactly this.

/** FNV-1a's prime: one multiply and one xor per word and lane. */
export const PART_CHECKSUM_PRIME = 0x01000193;
/** Lanes of a block: its word i goes into lane i mod 32. */
export const PART_CHECKSUM_LANES = 32;
/** Bytes of one block (the last may be shorter). */
export const PART_CHECKSUM_BLOCK_BYTES = 1 << 16;

const FNV_OFFSET = 0x811c9dc5;

/** Lane j's state at the start of every block. */
export function partChecksumLaneStart(j: number): number {
  return Math.imul(FNV_OFFSET ^ j, PART_CHECKSUM_PRIME) >>> 0;
}

/** Fresh lanes for a block. */
export function partChecksumLanes(): Uint32Array {
  const lanes = new Uint32Array(PART_CHECKSUM_LANES);
  for (let j = 0; j < PART_CHECKSUM_LANES; j++) lanes[j] = partChecksumLaneStart(j);
  return lanes;
}

/** A block's word: its lanes after its whole words, its trailing bytes (into lane 0) and its length. */
export function partChecksumBlockWord(
  lanes: Uint32Array,
  tail: ArrayLike<number>,
  blockBytes: number,
): number {
  for (let i = 0; i < tail.length; i++) lanes[0] = Math.imul(lanes[0]! ^ tail[i]!, PART_CHECKSUM_PRIME);
  let h = blockBytes >>> 0;
  for (let j = 0; j < PART_CHECKSUM_LANES; j++) h = (h ^ Math.imul(lanes[j]!, 2 * j + 3)) >>> 0;
  return Math.imul(h ^ (h >>> 15), 0x2c1b3c6d) >>> 0;
}

/** The checksum of `byteLength` bytes from their blocks' words, in order. */
export function partChecksumOfBlocks(blockWords: ArrayLike<number>, byteLength: number): number {
  let h = FNV_OFFSET;
  for (let b = 0; b < blockWords.length; b++) h = Math.imul(h ^ blockWords[b]!, PART_CHECKSUM_PRIME);
  h = (h ^ byteLength) >>> 0;
  return Math.imul(h ^ (h >>> 16), 0x7feb352d) >>> 0;
}

/** Blocks of `byteLength` bytes (none for none). */
export function partChecksumBlocks(byteLength: number): number {
  return Math.ceil(byteLength / PART_CHECKSUM_BLOCK_BYTES);
}

/** The checksum of `view`'s bytes, computed in scalar JavaScript: the reference. */
export function partChecksumReference(view: ArrayBufferView): number {
  const bytes = new Uint8Array(view.buffer, view.byteOffset, view.byteLength);
  const aligned = bytes.byteOffset % 4 === 0 ? bytes : bytes.slice();
  const words = new Uint32Array(aligned.buffer, aligned.byteOffset, aligned.byteLength >>> 2);
  const blockWords = new Uint32Array(partChecksumBlocks(bytes.length));
  const wordsPerBlock = PART_CHECKSUM_BLOCK_BYTES / 4;
  for (let b = 0; b < blockWords.length; b++) {
    const lanes = partChecksumLanes();
    const from = b * wordsPerBlock;
    const to = Math.min(words.length, from + wordsPerBlock);
    for (let i = from; i < to; i++) {
      const j = (i - from) & (PART_CHECKSUM_LANES - 1);
      lanes[j] = Math.imul(lanes[j]! ^ words[i]!, PART_CHECKSUM_PRIME);
    }
    const end = Math.min(bytes.length, (b + 1) * PART_CHECKSUM_BLOCK_BYTES);
    blockWords[b] = partChecksumBlockWord(
      lanes,
      aligned.subarray(to * 4, end),
      end - b * PART_CHECKSUM_BLOCK_BYTES,
    );
  }
  return partChecksumOfBlocks(blockWords, bytes.length);
}
