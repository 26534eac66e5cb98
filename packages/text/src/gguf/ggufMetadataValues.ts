import { InvalidArgumentError } from '@rayo/core';
import { type GgufMetadata, metadataInteger, metadataString, PackedStrings } from '@rayo/train';

const KERNEL = 'Tokenizer.fromGguf';

function wrong(key: string, expected: string, actual: string): never {
  throw new InvalidArgumentError(`GGUF metadata '${key}' is not readable`, {
    operation: KERNEL,
    argument: key,
    expected,
    actual,
  });
}

function describe(metadata: GgufMetadata, key: string): string {
  const entry = metadata.get(key);
  if (entry === undefined) return 'absent';
  return entry.type === 'array' ? `an array of ${entry.itemType}` : entry.type;
}

/** A required array of strings, packed (as read from a file, or packed here from the items). */
export function packedStringArray(metadata: GgufMetadata, key: string): PackedStrings {
  const entry = metadata.get(key);
  if (entry?.type !== 'array' || entry.itemType !== 'string') {
    wrong(key, 'an array of strings', describe(metadata, key));
  }
  return entry.packed ?? PackedStrings.of(entry.value);
}

/** An optional array of numbers (any integer or float item type). */
export function numberArray(metadata: GgufMetadata, key: string): readonly number[] | undefined {
  const entry = metadata.get(key);
  if (entry === undefined) return undefined;
  if (entry.type !== 'array') wrong(key, 'an array of numbers', describe(metadata, key));
  if (entry.itemType === 'int64' || entry.itemType === 'uint64') {
    return (entry.value as readonly bigint[]).map(Number);
  }
  if (entry.itemType === 'bool' || entry.itemType === 'string' || entry.itemType === 'array') {
    wrong(key, 'an array of numbers', describe(metadata, key));
  }
  return entry.value as readonly number[];
}

export function optionalBool(metadata: GgufMetadata, key: string): boolean | undefined {
  const entry = metadata.get(key);
  if (entry === undefined) return undefined;
  if (entry.type !== 'bool') wrong(key, 'a bool', describe(metadata, key));
  return entry.value;
}

/** An optional token id, checked against the vocabulary's size. */
export function optionalTokenId(metadata: GgufMetadata, key: string, vocabSize: number): number | undefined {
  const id = metadataInteger(metadata, key);
  if (id === undefined) return undefined;
  if (id < 0 || id >= vocabSize) wrong(key, `a token id in [0, ${vocabSize})`, String(id));
  return id;
}

export { metadataString };
