import { encodeSafetensors, openNodeFile, readableAsFloat, SafetensorsFile } from '@rayo/train';
import {
  fifo,
  type HostileCase,
  type HostileReader,
  LittleEndianBytes,
  link,
  singleFileCases,
} from './hostileFiles.js';

/** Opens a safetensors file and reads every float tensor, as a loader would. */
export const safetensorsReader: HostileReader = {
  name: 'SafetensorsFile',
  namesFile: true,
  async read(path) {
    const raw = await openNodeFile(path);
    try {
      const file = await SafetensorsFile.open(raw);
      for (const entry of file.entries.values()) if (readableAsFloat(entry)) await file.readF32(entry.name);
    } finally {
      await raw.close();
    }
  },
};

/** A valid file: two tensors and metadata. */
export function validSafetensors(): Uint8Array {
  return encodeSafetensors(
    {
      a: { dtype: 'f32', shape: [2, 3], data: Float32Array.of(1, 2, 3, 4, 5, 6) },
      b: { dtype: 'bf16', shape: [4], data: Uint16Array.of(0x3f80, 0, 0x4000, 0xbf80) },
    },
    { note: 'valid' },
  );
}

/** A file of a raw JSON header text and `dataBytes` zero bytes of data. */
export function rawSafetensors(header: string, dataBytes = 16, declaredLength?: number | bigint): Uint8Array {
  const json = new TextEncoder().encode(header);
  return new LittleEndianBytes()
    .u64(declaredLength ?? json.length)
    .raw(json)
    .zeros(dataBytes)
    .done();
}

const entry = (dtype: unknown, shape: unknown, offsets: unknown) =>
  JSON.stringify({ dtype, shape, data_offsets: offsets });
/** Two F32 [2] tensors over 16 bytes, the second as given. */
const withSecond = (second: string) => `{"a":${entry('F32', [2], [0, 8])},"b":${second}}`;

const fileCase = singleFileCases('safetensors', 'model.safetensors', safetensorsReader);

function truncations(): HostileCase[] {
  const valid = validSafetensors();
  const headerEnd = 8 + Number(new DataView(valid.buffer).getBigUint64(0, true));
  const cuts = [0, 1, 4, 7, 8, 9, 12, 16, headerEnd - 20, headerEnd - 1, headerEnd, headerEnd + 1];
  cuts.push(headerEnd + 12, valid.length - 2, valid.length - 1);
  return cuts.map((cut) =>
    fileCase('truncated', `cut at byte ${cut} of ${valid.length}`, () => valid.subarray(0, cut)),
  );
}

function headerLengths(): HostileCase[] {
  const lengths: [string, bigint][] = [
    ['2^64 - 1', 2n ** 64n - 1n],
    ['2^53', 2n ** 53n],
    ['just above the 100 MB cap', 100_000_001n],
    ['beyond the file', 1000n],
  ];
  const cases = lengths.map(([label, length]) =>
    fileCase(
      'absurd header length',
      label,
      () => rawSafetensors(withSecond(entry('F32', [2], [8, 16])), 16, length),
      /header length/,
    ),
  );
  cases.push(fileCase('absurd header length', 'zero (no header)', () => rawSafetensors('', 16, 0)));
  return cases;
}

function headers(): HostileCase[] {
  const invalidUtf8 = () => {
    const bytes = rawSafetensors(`{"\u00e9":${entry('F32', [4], [0, 16])}}`);
    bytes[10] = 0xff; // the first byte of é: a lone 0xff is never UTF-8
    return bytes;
  };
  return [
    fileCase('header syntax', 'not JSON', () => rawSafetensors('{"a": ')),
    fileCase('header syntax', 'a JSON array', () => rawSafetensors('[]', 0)),
    fileCase('header syntax', 'a JSON string', () => rawSafetensors('"tensors"', 0)),
    fileCase('header syntax', 'JSON null', () => rawSafetensors('null', 0)),
    fileCase('header syntax', 'a JSON number', () => rawSafetensors('1', 0)),
    fileCase('header syntax', 'invalid UTF-8 in a key', invalidUtf8, /UTF-8/),
  ];
}

function entries(): HostileCase[] {
  const bad = (name: string, second: string, mentions?: RegExp) =>
    fileCase('tensor entry', name, () => rawSafetensors(withSecond(second)), mentions);
  const offsets = (name: string, value: unknown) =>
    bad(`data_offsets ${name}`, entry('F32', [2], value), /data_offsets|start|owns/);
  return [
    bad('entry is a number', '7', /'b'/),
    bad('entry is an array', '[8, 16]', /'b'/),
    bad('entry is null', 'null', /'b'/),
    bad('unknown dtype F128', entry('F128', [2], [8, 16]), /dtype/),
    bad('dtype is a number', entry(4, [2], [8, 16]), /dtype/),
    bad("dtype '__proto__'", entry('__proto__', [2], [8, 16]), /dtype/),
    bad("dtype 'toString'", entry('toString', [2], [8, 16]), /dtype/),
    bad(
      'dtype of the wrong width (F64 over 8 bytes for 2 elements)',
      entry('F64', [2], [8, 16]),
      /data_offsets/,
    ),
    bad('negative dimension', entry('F32', [-2], [8, 16]), /shape/),
    bad('fractional dimension', entry('F32', [2.5], [8, 16]), /shape/),
    bad('shape is a string', entry('F32', '2', [8, 16]), /shape/),
    bad('dimension 2^60', entry('F32', [2 ** 60], [8, 16]), /shape/),
    bad(
      'dimensions whose product overflows',
      entry('F32', [2 ** 30, 2 ** 30, 2 ** 30], [8, 16]),
      /data_offsets/,
    ),
    bad('dimension 1e300', entry('F32', [1e300], [8, 16]), /shape/),
    offsets('of three numbers', [8, 16, 24]),
    offsets('negative', [-8, 0]),
    offsets('reversed', [16, 8]),
    offsets('fractional', [8, 16.5]),
    offsets('beyond the data', [16, 24]),
    offsets('overlapping the first tensor', [4, 12]),
    offsets('leaving a gap', [12, 20]),
    offsets('at 2^60', [2 ** 60, 2 ** 60 + 8]),
    offsets('missing', undefined),
  ];
}

function duplicates(): HostileCase[] {
  const tensor = entry('F32', [2], [0, 8]);
  const dup = (name: string, header: string) =>
    fileCase('duplicate keys', name, () => rawSafetensors(header, 8), /appears twice/);
  return [
    dup('a tensor twice, same entry', `{"a":${tensor},"a":${tensor}}`),
    dup(
      'a tensor twice, another dtype',
      `{"a":${entry('F32', [2], [0, 8])},"a":${entry('I32', [2], [0, 8])}}`,
    ),
    dup('a tensor twice, one key escaped', `{"a":${tensor},"\\u0061":${tensor}}`),
    dup('__metadata__ twice', `{"__metadata__":{},"a":${tensor},"__metadata__":{"k":"v"}}`),
    dup('a metadata key twice', `{"__metadata__":{"k":"v","k":"w"},"a":${tensor}}`),
  ];
}

function metadata(): HostileCase[] {
  const tensor = entry('F32', [2], [0, 8]);
  const meta = (name: string, value: string) =>
    fileCase(
      'metadata',
      name,
      () => rawSafetensors(`{"__metadata__":${value},"a":${tensor}}`, 8),
      /metadata/,
    );
  return [
    meta('metadata is a string', '"v"'),
    meta('metadata is an array', '["v"]'),
    meta('metadata is a number', '3'),
    meta('a metadata value is a number', '{"k":3}'),
    meta('a metadata value is an object', '{"k":{"nested":"v"}}'),
  ];
}

/** Safetensors files a careful reader refuses. */
export function safetensorsCases(): HostileCase[] {
  const notRegular = (name: string, write: (dir: string) => Promise<string>): HostileCase => ({
    kind: 'safetensors: not a regular file',
    name,
    reader: safetensorsReader,
    mentions: /regular file/,
    write,
  });
  return [
    notRegular('a FIFO', (dir) => fifo(dir, 'model.safetensors')),
    notRegular('a link to a device', (dir) => link(dir, 'model.safetensors', '/dev/zero')),
    ...truncations(),
    fileCase('trailing bytes', 'one byte no tensor owns', () => {
      const valid = validSafetensors();
      const longer = new Uint8Array(valid.length + 1);
      longer.set(valid);
      return longer;
    }),
    ...headerLengths(),
    ...headers(),
    ...entries(),
    ...duplicates(),
    ...metadata(),
  ];
}
