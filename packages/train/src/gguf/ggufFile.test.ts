import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DTypeError, f16BitsToF32, f32ToF16Bits, RayoError } from '@rayo/core';
import { memoryFile } from '@rayo/train-testkit';
import { afterAll, describe, expect, it } from 'vitest';
import { openNodeFile } from '../checkpoint/randomAccessFile.js';
import { Rng } from '../random.js';
import type { GgmlType } from './ggmlTypes.js';
import { GgufFile } from './ggufFile.js';
import type { GgufValue } from './metadata.js';
import { quantize } from './quantize.js';
import { encodeGguf, type GgufContents, writeGgufFile } from './writer.js';

const METADATA: [string, GgufValue][] = [
  ['general.architecture', { type: 'string', value: 'llama' }],
  ['general.name', { type: 'string', value: 'tiny ñandú 🦙' }],
  ['u8', { type: 'uint8', value: 255 }],
  ['i8', { type: 'int8', value: -128 }],
  ['u16', { type: 'uint16', value: 65535 }],
  ['i16', { type: 'int16', value: -32768 }],
  ['u32', { type: 'uint32', value: 4294967295 }],
  ['i32', { type: 'int32', value: -2147483648 }],
  ['f32', { type: 'float32', value: 1.5 }],
  ['f64', { type: 'float64', value: Math.PI }],
  ['bool.true', { type: 'bool', value: true }],
  ['bool.false', { type: 'bool', value: false }],
  ['u64', { type: 'uint64', value: 2n ** 64n - 1n }],
  ['i64', { type: 'int64', value: -(2n ** 63n) }],
  // A leading U+FEFF is a character of the string, not a byte-order mark to drop.
  [
    'tokens',
    { type: 'array', itemType: 'string', value: ['<s>', '</s>', 'hello', '', '\uFEFF', '\uFEFFhi'] },
  ],
  ['scores', { type: 'array', itemType: 'float32', value: [0, -1.25, 3.5] }],
  ['ids', { type: 'array', itemType: 'int32', value: [-1, 0, 7] }],
  ['flags', { type: 'array', itemType: 'bool', value: [true, false] }],
  ['big', { type: 'array', itemType: 'uint64', value: [0n, 2n ** 40n] }],
  ['empty', { type: 'array', itemType: 'uint8', value: [] }],
  [
    'nested',
    {
      type: 'array',
      itemType: 'array',
      value: [
        { type: 'array', itemType: 'int16', value: [1, -2] },
        { type: 'array', itemType: 'string', value: ['a'] },
      ],
    },
  ],
];

const FLOAT_AND_QUANTIZED: GgmlType[] = ['F32', 'F16', 'BF16', 'Q8_0', 'Q4_0', 'Q4_K', 'Q6_K'];

function randomValues(seed: number, n: number): Float32Array {
  const rng = new Rng(seed);
  return Float32Array.from({ length: n }, () => rng.uniform(-2, 2));
}

/** One tensor of every writable type, [3, 512] (two K super-blocks, sixteen 32-blocks per row), plus a 1-D one. */
function contents(version: 2 | 3, alignment?: number): GgufContents {
  const metadata: [string, GgufValue][] = [...METADATA];
  if (alignment !== undefined) metadata.push(['general.alignment', { type: 'uint32', value: alignment }]);
  return {
    version,
    metadata,
    tensors: [
      ...FLOAT_AND_QUANTIZED.map((type, i) => ({
        name: `t.${type}`,
        type,
        shape: [3, 512],
        values: randomValues(i, 3 * 512),
      })),
      { name: 'vector', type: 'F32' as const, shape: [5], values: Float32Array.of(1, 2, 3, 4, 5) },
    ],
  };
}

describe('GGUF writer and reader', () => {
  for (const version of [2, 3] as const) {
    for (const alignment of [undefined, 64]) {
      it(`round-trips every metadata type and tensor type (v${version}, alignment ${alignment ?? 'default'})`, async () => {
        const written = contents(version, alignment);
        const bytes = encodeGguf(written);
        const gguf = await GgufFile.open(memoryFile(bytes), { headerChunkBytes: 16 });
        expect(gguf.version).toBe(version);
        expect(gguf.alignment).toBe(alignment ?? 32);
        expect(gguf.dataStart % gguf.alignment).toBe(0);
        expect([...gguf.metadata]).toEqual([...written.metadata]);
        expect([...gguf.tensors.keys()]).toEqual(written.tensors.map((t) => t.name));
        for (const tensor of written.tensors) {
          const info = gguf.tensor(tensor.name);
          expect(info.type).toBe(tensor.type);
          expect(info.shape).toEqual(tensor.shape);
          expect(info.dims).toEqual([...tensor.shape].reverse());
          expect(info.offset % gguf.alignment).toBe(0);
          const stored = await gguf.readBytes(tensor.name);
          expect(stored.length).toBe(info.byteLength);
          if (
            tensor.type === 'Q8_0' ||
            tensor.type === 'Q4_0' ||
            tensor.type === 'Q4_K' ||
            tensor.type === 'Q6_K'
          )
            expect(stored).toEqual(quantize(tensor.type, tensor.values!));
        }
        expect(Array.from(await gguf.readFloat('t.F32', 'f32'))).toEqual(
          Array.from(written.tensors[0]!.values!),
        );
        const f16 = (await gguf.readFloat('t.F16', 'f16')) as Uint16Array;
        expect(Array.from(f16)).toEqual(Array.from(written.tensors[1]!.values!, (v) => f32ToF16Bits(v)));
        // Widening is exact, and a conversion between half formats rounds once.
        expect(Array.from(await gguf.readFloat('t.F16', 'f32'))).toEqual(Array.from(f16, f16BitsToF32));
        expect(Array.from(await gguf.readFloat('vector', 'f32'))).toEqual([1, 2, 3, 4, 5]);
      });
    }
  }

  it('streams: the header in chunks, each tensor in pieces of at most maxReadBytes, each byte at most once', async () => {
    const bytes = encodeGguf(contents(3));
    const reads: { position: number; length: number }[] = [];
    const gguf = await GgufFile.open(memoryFile(bytes, reads), { headerChunkBytes: 64, maxReadBytes: 100 });
    const headerReads = reads.length;
    expect(Math.max(...reads.map((r) => r.length))).toBeLessThanOrEqual(64);
    for (const name of gguf.tensors.keys()) await gguf.readBytes(name);
    const data = reads.slice(headerReads);
    expect(Math.max(...data.map((r) => r.length))).toBeLessThanOrEqual(100);
    // The header's reads and the tensors' reads each take a byte at most once; the header's last
    // chunk may reach past its end into the first tensor's bytes (it cannot know where it ends).
    const timesRead = (part: typeof reads) => {
      const seen = new Uint8Array(bytes.length);
      for (const r of part) for (let b = r.position; b < r.position + r.length; b++) seen[b]!++;
      return seen;
    };
    expect(timesRead(reads.slice(0, headerReads)).every((n) => n <= 1)).toBe(true);
    expect(timesRead(data).every((n) => n <= 1)).toBe(true);
    const headerEnd = Math.max(...reads.slice(0, headerReads).map((r) => r.position + r.length));
    const dataStart = Math.min(...data.map((r) => r.position));
    expect(headerEnd - dataStart).toBeLessThan(64);
  });

  it('reads string arrays decoded together exactly as one by one, at every chunk size', async () => {
    const rng = new Rng(5);
    const pieces = ['a', 'Ġthe', 'ñ', '€', '🦙', '\uFEFF', '', ' ', '\u0000', 'ĊĊ', '日本'];
    const tokens = Array.from({ length: 700 }, (_, i) =>
      i % 97 === 0 ? '' : Array.from({ length: 1 + (i % 4) }, () => pieces[rng.int(pieces.length)]).join(''),
    );
    const bytes = encodeGguf({
      metadata: [['tokens', { type: 'array', itemType: 'string', value: tokens }]],
      tensors: [],
    });
    for (const headerChunkBytes of [8, 13, 64, 1000, 2 ** 20]) {
      const gguf = await GgufFile.open(memoryFile(bytes), { headerChunkBytes });
      expect(gguf.metadata.get('tokens')?.value, `chunks of ${headerChunkBytes}`).toEqual(tokens);
    }
  });

  it('refuses a string of an array that is not UTF-8, even where the joined bytes would be', async () => {
    // Two strings that together are '€' (E2 82 AC) but alone are a cut character and a stray continuation.
    const encode = (value: string[]) =>
      encodeGguf({ metadata: [['tokens', { type: 'array', itemType: 'string', value }]], tensors: [] });
    const cut = encode(['ok', 'xy', 'z', 'ok']);
    const at = cut.indexOf(0x78); // 'x'
    cut.set([0xe2, 0x82], at);
    cut[at + 2 + 8] = 0xac; // 'z', after its u64 length
    await expect(GgufFile.open(memoryFile(cut))).rejects.toThrow(/GGUF metadata 'tokens' item is not UTF-8/);
    const invalid = encode(['ok', 'abc', 'ok']);
    invalid[invalid.indexOf(0x62)] = 0xff; // 'b'
    for (const headerChunkBytes of [8, 2 ** 20]) {
      await expect(GgufFile.open(memoryFile(invalid), { headerChunkBytes })).rejects.toThrow(/is not UTF-8/);
    }
  });

  it('reopens a header over another handle of the file without reading it again, and refuses another size', async () => {
    const bytes = encodeGguf(contents(3));
    const header = await GgufFile.open(memoryFile(bytes));
    const reads: { position: number; length: number }[] = [];
    const again = header.reopened(memoryFile(bytes, reads));
    expect(reads).toEqual([]);
    expect(again.tensors).toBe(header.tensors);
    const name = [...header.tensors.keys()][1]!;
    expect(await again.readBytes(name)).toEqual(await header.readBytes(name));
    expect(() => header.reopened(memoryFile(bytes.subarray(0, bytes.length - 1)))).toThrow(
      expect.objectContaining({ expected: `${bytes.length} bytes`, actual: `${bytes.length - 1}` }),
    );
  });

  it('writes and reads through Node file handles', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'gguf-'));
    afterAll(() => rm(dir, { recursive: true, force: true }));
    const path = join(dir, 'model.gguf');
    await writeGgufFile(path, contents(3));
    const gguf = await GgufFile.open(await openNodeFile(path));
    try {
      expect(await gguf.readBytes('t.Q4_K')).toEqual(quantize('Q4_K', contents(3).tensors[5]!.values!));
    } finally {
      await gguf.close();
    }
  });

  it('never reads a quantized tensor as floats', async () => {
    const gguf = await GgufFile.open(memoryFile(encodeGguf(contents(3))));
    await expect(gguf.readFloat('t.Q6_K', 'f32')).rejects.toThrow(DTypeError);
    await expect(gguf.readFloat('t.Q6_K', 'f32')).rejects.toThrow(/Q6_K/);
  });

  describe('refuses malformed files, naming what is wrong', () => {
    const valid = () => encodeGguf(contents(3));
    const open = (bytes: Uint8Array) => GgufFile.open(memoryFile(bytes));
    const withU32 = (at: number, value: number) => {
      const bytes = valid();
      new DataView(bytes.buffer).setUint32(at, value, true);
      return bytes;
    };

    it('a wrong magic', async () => {
      await expect(open(withU32(0, 0x12345678))).rejects.toThrow(/not a GGUF file/);
    });
    it('version 1 and big-endian files', async () => {
      await expect(open(withU32(4, 1))).rejects.toThrow(/unsupported GGUF version.*got 1/);
      await expect(open(withU32(4, 0x03000000))).rejects.toThrow(/big-endian/);
    });
    it('a header cut short', async () => {
      await expect(open(valid().subarray(0, 200))).rejects.toThrow(/ends inside the GGUF header/);
    });
    it('tensor data beyond the end of the file', async () => {
      const bytes = valid();
      await expect(open(bytes.subarray(0, bytes.length - 40))).rejects.toThrow(
        /'vector' lies beyond the end/,
      );
    });
    it('an unaligned tensor, an unknown type, a row of partial blocks', async () => {
      const tensors = [{ name: 'x', type: 'F32' as const, shape: [8], values: new Float32Array(8) }];
      const bytes = encodeGguf({ metadata: [], tensors });
      // The header: 24 bytes, then 'x': name (8 + 1), n_dims (4), dims (8), type (4), offset (8).
      const typeAt = 24 + 9 + 4 + 8;
      const view = new DataView(bytes.buffer);
      view.setBigUint64(typeAt + 4, 4n, true);
      await expect(open(bytes)).rejects.toThrow(/'x' is not aligned/);
      view.setBigUint64(typeAt + 4, 0n, true);
      view.setUint32(typeAt, 4, true);
      await expect(open(bytes)).rejects.toThrow(/unknown ggml type/);
      view.setUint32(typeAt, 8, true);
      await expect(open(bytes)).rejects.toThrow(/multiple of 32/);
    });
    it('an unknown value type', async () => {
      const bytes = encodeGguf({ metadata: [['k', { type: 'uint8', value: 1 }]], tensors: [] });
      new DataView(bytes.buffer).setUint32(24 + 9, 13, true);
      await expect(open(bytes)).rejects.toThrow(RayoError);
      await expect(open(bytes)).rejects.toThrow(/unknown value type/);
    });
  });

  it('the writer refuses values out of range and bytes that do not fit', () => {
    expect(() => encodeGguf({ metadata: [['k', { type: 'uint8', value: 256 }]], tensors: [] })).toThrow(
      /out of range/,
    );
    expect(() => encodeGguf({ metadata: [['k', { type: 'int64', value: 2n ** 63n }]], tensors: [] })).toThrow(
      /out of range/,
    );
    expect(() =>
      encodeGguf({
        metadata: [],
        tensors: [{ name: 'q', type: 'Q8_0', shape: [32], bytes: new Uint8Array(33) }],
      }),
    ).toThrow(/34 bytes/);
    expect(() =>
      encodeGguf({
        metadata: [],
        tensors: [{ name: 'q', type: 'Q4_K', shape: [2, 128], values: new Float32Array(256) }],
      }),
    ).toThrow(/multiple of 256/);
  });
});
