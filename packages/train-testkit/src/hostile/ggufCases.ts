import { truncate } from 'node:fs/promises';
import type { GgufValue } from '@rayo/train';
import {
  encodeGguf,
  GGUF_MAX_METADATA_ITEMS,
  GgufFile,
  type GgufTensorToWrite,
  ggufLlamaMetadata,
  ggufNameOfHf,
  isGgmlFloatType,
  llamaWeightShapes,
  openGgufLlama,
  openNodeFile,
  parseLlamaConfig,
} from '@rayo/train';
import { TINY_CONFIG } from './checkpointFolderCases.js';
import {
  fifo,
  type HostileCase,
  type HostileReader,
  LittleEndianBytes,
  link,
  put,
  singleFileCases,
} from './hostileFiles.js';

/** Opens a GGUF file and reads every tensor's bytes (and each float tensor as f32). */
export const ggufReader: HostileReader = {
  name: 'GgufFile',
  namesFile: true,
  async read(path) {
    const raw = await openNodeFile(path);
    try {
      const file = await GgufFile.open(raw);
      for (const [name, info] of file.tensors) {
        await file.readBytes(name);
        if (isGgmlFloatType(info.type)) await file.readFloat(name, 'f32');
      }
    } finally {
      await raw.close();
    }
  },
};

/** Opens a GGUF file as a Llama-family decoder: header, config from the metadata, tensor table checked. */
export const ggufLlamaReader: HostileReader = {
  name: 'openGgufLlama',
  namesFile: true,
  async read(path) {
    await (await openGgufLlama(path)).close();
  },
};

/** A valid file: metadata of every kind (a string array among them), an F32 and an F16 tensor. */
export function validGguf(): Uint8Array {
  return encodeGguf({
    metadata: [
      ['general.architecture', { type: 'string', value: 'test' }],
      ['general.alignment', { type: 'uint32', value: 32 }],
      ['test.flag', { type: 'bool', value: true }],
      ['test.tokens', { type: 'array', itemType: 'string', value: ['a', 'bc', 'def'] }],
    ],
    tensors: [
      { name: 'w', type: 'F32', shape: [2, 4], values: Float32Array.from({ length: 8 }, (_, i) => i) },
      { name: 'h', type: 'F16', shape: [8], values: new Float32Array(8) },
    ],
  });
}

const TYPE = { uint8: 0, uint32: 4, float32: 6, bool: 7, string: 8, array: 9, uint64: 10 } as const;

interface HandMade {
  readonly version?: number;
  readonly magic?: number;
  readonly tensorCount?: bigint | number;
  readonly kvCount?: bigint | number;
  /** Writes the metadata entries. */
  readonly kv?: (w: LittleEndianBytes) => void;
  /** Writes the tensor infos. */
  readonly infos?: (w: LittleEndianBytes) => void;
  /** Bytes of data after the header's padding to 32. */
  readonly dataBytes?: number;
}

/** A GGUF file written field by field, so that any field can be wrong. */
function handMade(spec: HandMade): Uint8Array {
  const w = new LittleEndianBytes()
    .u32(spec.magic ?? 0x46554747)
    .u32(spec.version ?? 3)
    .u64(spec.tensorCount ?? 0)
    .u64(spec.kvCount ?? 0);
  spec.kv?.(w);
  spec.infos?.(w);
  w.zeros((32 - (w.length % 32)) % 32);
  return w.zeros(spec.dataBytes ?? 0).done();
}

/** A tensor info: name, dims (innermost first), ggml type id, offset. */
function info(
  w: LittleEndianBytes,
  name: string,
  dims: readonly (number | bigint)[],
  type: number,
  offset: number | bigint,
) {
  w.string(name).u32(dims.length);
  for (const d of dims) w.u64(d);
  w.u32(type).u64(offset);
}

const fileCase = singleFileCases('gguf', 'model.gguf', ggufReader);

function truncations(): HostileCase[] {
  const valid = validGguf();
  const cuts = [
    0,
    3,
    4,
    8,
    16,
    23,
    24,
    30,
    40,
    60,
    90,
    120,
    150,
    180,
    200,
    224,
    valid.length - 40,
    valid.length - 20,
  ];
  return cuts.map((cut) =>
    fileCase('truncated', `cut at byte ${cut} of ${valid.length}`, () => valid.subarray(0, cut)),
  );
}

function fixedHeader(): HostileCase[] {
  return [
    fileCase('fixed header', 'bad magic', () => handMade({ magic: 0x46554746 }), /magic/),
    fileCase('fixed header', 'version 1', () => handMade({ version: 1 }), /version/),
    fileCase('fixed header', 'version 4', () => handMade({ version: 4 }), /version/),
    fileCase('fixed header', 'a big-endian version 3', () => handMade({ version: 0x03000000 }), /big-endian/),
    fileCase(
      'fixed header',
      'tensor count 2^64 - 1',
      () => handMade({ tensorCount: 2n ** 64n - 1n }),
      /tensor count/,
    ),
    fileCase(
      'fixed header',
      'metadata count 2^64 - 1',
      () => handMade({ kvCount: 2n ** 64n - 1n }),
      /metadata count/,
    ),
    fileCase(
      'fixed header',
      'metadata count one above the bytes left',
      () => handMade({ kvCount: 1, dataBytes: 0 }),
      /metadata count/,
    ),
  ];
}

/** One metadata entry `key` of type `type`, then `value` writes its bytes. */
const oneKv =
  (key: string, type: number, value: (w: LittleEndianBytes) => void) => (w: LittleEndianBytes) => {
    w.string(key).u32(type);
    value(w);
  };

/** Arrays of arrays `depth` deep, the innermost empty: 12 bytes a level. */
function nestedArrays(depth: number): (w: LittleEndianBytes) => void {
  return (w) => {
    for (let i = 1; i < depth; i++) w.u32(TYPE.array).u64(1);
    w.u32(TYPE.uint8).u64(0);
  };
}

function metadata(): HostileCase[] {
  const kv = (name: string, write: (w: LittleEndianBytes) => void, mentions?: RegExp, dataBytes = 64) =>
    fileCase('metadata', name, () => handMade({ kvCount: 1, kv: write, dataBytes }), mentions);
  /** A `general.alignment` of `type` that the reader must refuse. */
  const alignment = (name: string, type: number, value: (w: LittleEndianBytes) => void) =>
    kv(name, oneKv('general.alignment', type, value), /alignment/);
  return [
    kv('key length 2^64 - 1', (w) => w.u64(2n ** 64n - 1n), /key 0 length/),
    kv('key length beyond the file', (w) => w.u64(1000).raw([0x61]), /key 0 length/),
    kv('key not UTF-8', (w) => w.u64(2).raw([0xff, 0xfe]).u32(TYPE.uint8).u8(0), /UTF-8/),
    kv(
      'unknown value type 13',
      oneKv('k', 13, (w) => w.u8(0)),
      /unknown value type/,
    ),
    kv(
      'value type 2^32 - 1',
      oneKv('k', 0xffffffff, (w) => w.u8(0)),
      /unknown value type/,
    ),
    kv(
      'a bool of 2',
      oneKv('k', TYPE.bool, (w) => w.u8(2)),
      /bool/,
    ),
    kv(
      'string length 2^63',
      oneKv('k', TYPE.string, (w) => w.u64(2n ** 63n)),
      /length/,
    ),
    kv(
      'string length beyond the file',
      oneKv('k', TYPE.string, (w) => w.u64(100_000)),
      /length/,
    ),
    kv(
      'array count 2^64 - 1',
      oneKv('k', TYPE.array, (w) => w.u32(TYPE.uint8).u64(2n ** 64n - 1n)),
      /count/,
    ),
    kv(
      'u32 array count above the bytes left',
      oneKv('k', TYPE.array, (w) => w.u32(TYPE.uint32).u64(20)),
      /count/,
    ),
    kv(
      'string array count above the bytes left',
      oneKv('k', TYPE.array, (w) => w.u32(TYPE.string).u64(1000)),
      /count/,
    ),
    kv(
      'array item type 13',
      oneKv('k', TYPE.array, (w) => w.u32(13).u64(1)),
      /unknown value type/,
    ),
    {
      kind: 'gguf: metadata',
      name: 'more array items than the metadata limit (sparse file)',
      reader: ggufReader,
      mentions: /item limit/,
      async write(dir) {
        const items = GGUF_MAX_METADATA_ITEMS + 1;
        const head = handMade({
          kvCount: 1,
          kv: oneKv('k', TYPE.array, (w) => w.u32(TYPE.uint8).u64(items)),
        });
        const path = await put(dir, 'model.gguf', head);
        await truncate(path, head.length + items);
        return path;
      },
    },
    kv('arrays nested 5 deep', oneKv('k', TYPE.array, nestedArrays(5)), /nests arrays too deeply/),
    kv('arrays nested 1000 deep', oneKv('k', TYPE.array, nestedArrays(1000)), /nests arrays too deeply/),
    // The reported crash: a ~360 KB file of nested arrays grew memory quadratically until V8 aborted.
    kv(
      'arrays nested 30000 deep (360 KB)',
      oneKv('k', TYPE.array, nestedArrays(30_000)),
      /nests arrays too deeply/,
    ),
    fileCase(
      'metadata',
      'a key twice',
      () =>
        handMade({
          kvCount: 2,
          kv: (w) => {
            oneKv('k', TYPE.uint8, (v) => v.u8(1))(w);
            oneKv('k', TYPE.uint8, (v) => v.u8(2))(w);
          },
          dataBytes: 32,
        }),
      /appears twice/,
    ),
    alignment('alignment 0', TYPE.uint32, (w) => w.u32(0)),
    alignment('alignment 3', TYPE.uint32, (w) => w.u32(3)),
    alignment('alignment as a string', TYPE.string, (w) => w.string('32')),
  ];
}

function tensorTable(): HostileCase[] {
  const table = (
    name: string,
    infos: (w: LittleEndianBytes) => void,
    count: number,
    dataBytes: number,
    mentions?: RegExp,
  ) => fileCase('tensor table', name, () => handMade({ tensorCount: count, infos, dataBytes }), mentions);
  const F32 = 0;
  const Q8_0 = 8;
  /** Two F32 tensors of `size` elements: 'a' at byte 0, then `second` at byte 32. */
  const twoF32 = (second: string, size: number) => (w: LittleEndianBytes) => {
    info(w, 'a', [size], F32, 0);
    info(w, second, [size], F32, 32);
  };
  return [
    table('no dimensions', (w) => info(w, 't', [], F32, 0), 1, 64, /dimension count/),
    table('5 dimensions', (w) => info(w, 't', [1, 1, 1, 1, 1], F32, 0), 1, 64, /dimension count/),
    table('2^32 - 1 dimensions', (w) => w.string('t').u32(0xffffffff).zeros(64), 1, 64, /dimension count/),
    table('a dimension of 2^63', (w) => info(w, 't', [2n ** 63n], F32, 0), 1, 64, /dims\[0\]/),
    table(
      'dimensions whose product overflows',
      (w) => info(w, 't', [2 ** 26, 2 ** 26, 2 ** 26], F32, 0),
      1,
      64,
      /beyond the end/,
    ),
    table('unknown ggml type 99', (w) => info(w, 't', [4], 99, 0), 1, 64, /unknown ggml type/),
    table('offset beyond the file', (w) => info(w, 't', [4], F32, 1 << 20), 1, 64, /offset beyond/),
    table('offset 2^64 - 1', (w) => info(w, 't', [4], F32, 2n ** 64n - 1n), 1, 64, /offset beyond/),
    table('offset not aligned', (w) => info(w, 't', [4], F32, 4), 1, 64, /not aligned/),
    table('data beyond the end', (w) => info(w, 't', [64], F32, 0), 1, 64, /beyond the end/),
    table('Q8_0 rows that are not whole blocks', (w) => info(w, 't', [33], Q8_0, 0), 1, 64, /blocks/),
    table('overlapping tensors', twoF32('b', 16), 2, 128, /overlaps/),
    table('a tensor name twice', twoF32('a', 4), 2, 64, /appears twice/),
  ];
}

/** A one-layer decoder's config, metadata and F32 tensors (valid: `openGgufLlama` accepts it). */
const TINY = parseLlamaConfig({ ...TINY_CONFIG, tie_word_embeddings: true });

function tinyTensors(): GgufTensorToWrite[] {
  return [...llamaWeightShapes(TINY)].map(([hfName, shape]) => ({
    name: ggufNameOfHf(hfName)!,
    type: 'F32' as const,
    shape,
    values: new Float32Array(shape.reduce((a, b) => a * b, 1)),
  }));
}

/** The tiny decoder's GGUF file with metadata `key` set to `value` (or removed, where undefined). */
export function tinyLlamaGguf(key?: string, value?: GgufValue): Uint8Array {
  const metadata = ggufLlamaMetadata(TINY).filter(([k]) => k !== key);
  if (key && value) metadata.push([key, value]);
  return encodeGguf({ metadata, tensors: tinyTensors() });
}

function llamaMetadata(): HostileCase[] {
  const llama = (name: string, key: string, value: GgufValue | undefined, mentions: RegExp): HostileCase => ({
    kind: 'gguf: llama metadata',
    name,
    reader: ggufLlamaReader,
    mentions,
    write: (dir) => put(dir, 'model.gguf', tinyLlamaGguf(key, value)),
  });
  const u32 = (value: number): GgufValue => ({ type: 'uint32', value });
  const u64 = (value: bigint): GgufValue => ({ type: 'uint64', value });
  const i64 = (value: bigint): GgufValue => ({ type: 'int64', value });
  return [
    llama('block_count 2^32 - 1', 'llama.block_count', u32(0xffffffff), /block_count/),
    llama('block_count 1e9 as uint64', 'llama.block_count', u64(10n ** 9n), /block_count/),
    llama('block_count 2^62 as int64', 'llama.block_count', i64(2n ** 62n), /block_count/),
    llama('block_count as a string', 'llama.block_count', { type: 'string', value: '1' }, /block_count/),
    llama('block_count as a float', 'llama.block_count', { type: 'float32', value: 1.5 }, /block_count/),
    llama('embedding_length 2^31', 'llama.embedding_length', u32(2 ** 31), /embedding_length/),
    llama('vocab_size 2^32 - 1', 'llama.vocab_size', u32(0xffffffff), /vocab_size/),
    llama('context_length 2^40', 'llama.context_length', u64(2n ** 40n), /context_length/),
    llama('feed_forward_length 2^31', 'llama.feed_forward_length', u32(2 ** 31), /feed_forward_length/),
    llama('head_count 0', 'llama.attention.head_count', u32(0), /head_count/),
    llama(
      'architecture unknown',
      'general.architecture',
      { type: 'string', value: 'gpt-hostile' },
      /architecture/,
    ),
    llama('architecture absent', 'general.architecture', undefined, /architecture/),
  ];
}

function notRegularFiles(): HostileCase[] {
  const file = (
    name: string,
    reader: HostileReader,
    write: (dir: string) => Promise<string>,
  ): HostileCase => ({
    kind: 'gguf: not a regular file',
    name: `${name} (${reader.name})`,
    reader,
    mentions: /regular file/,
    write,
  });
  return [
    file('a FIFO', ggufReader, (dir) => fifo(dir, 'model.gguf')),
    file('a FIFO', ggufLlamaReader, (dir) => fifo(dir, 'model.gguf')),
    file('a folder', ggufLlamaReader, async (dir) =>
      (await put(dir, 'model.gguf/inner', '')).replace(/\/inner$/, ''),
    ),
    file('a link to a device', ggufLlamaReader, (dir) => link(dir, 'model.gguf', '/dev/zero')),
  ];
}

/** GGUF files a careful reader refuses. */
export function ggufCases(): HostileCase[] {
  return [
    ...notRegularFiles(),
    ...truncations(),
    ...fixedHeader(),
    ...metadata(),
    ...tensorTable(),
    ...llamaMetadata(),
  ];
}
