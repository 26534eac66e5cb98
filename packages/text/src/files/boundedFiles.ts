import { InvalidArgumentError } from '@rayo/core';
import {
  FileSystemError,
  MAX_JSON_FILE_BYTES,
  type OpenFile,
  openNodeFile,
  readJsonFile,
  readWholeFile,
} from '@rayo/train';

// The text files of a model folder, read as @rayo/train reads config.json:
// regular files only, a size limit checked before reading, valid UTF-8, JSON
// nested at most MAX_JSON_DEPTH deep; a missing file is `undefined`. Files
// are opened with `openFile` (default: Node's file system; a URL opener reads
// a model over HTTP).

/**
 * Largest `tokenizer.json` read: 64 MiB, above the largest vocabularies
 * published (Qwen's and Llama 3's are 7–12 MB, Gemma's about 33 MB).
 */
export const MAX_TOKENIZER_JSON_BYTES = 64 * 2 ** 20;

function absent(error: unknown): boolean {
  return error instanceof FileSystemError && error.code === 'ENOENT';
}

/** A JSON object file of at most `maxBytes`, or undefined when the file does not exist. */
export async function readOptionalJsonObject(
  path: string,
  operation: string,
  maxBytes = MAX_JSON_FILE_BYTES,
  openFile: OpenFile = openNodeFile,
): Promise<Record<string, unknown> | undefined> {
  let value: unknown;
  try {
    value = await readJsonFile(openFile, path, operation, maxBytes);
  } catch (error) {
    if (absent(error)) return undefined;
    throw error;
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw new InvalidArgumentError(`${path} is not a JSON object`, {
      operation,
      argument: path,
      expected: 'a JSON object',
      actual: Array.isArray(value) ? 'an array' : value === null ? 'null' : typeof value,
    });
  }
  return value as Record<string, unknown>;
}

/** A UTF-8 text file of at most `maxBytes`, or undefined when the file does not exist. */
export async function readOptionalText(
  path: string,
  operation: string,
  maxBytes = MAX_JSON_FILE_BYTES,
  openFile: OpenFile = openNodeFile,
): Promise<string | undefined> {
  let bytes: Uint8Array;
  try {
    bytes = await readWholeFile(await openFile(path), maxBytes, operation);
  } catch (error) {
    if (absent(error)) return undefined;
    throw error;
  }
  try {
    return new TextDecoder('utf-8', { fatal: true }).decode(bytes);
  } catch (error) {
    throw new InvalidArgumentError(`${path} is not UTF-8 text`, {
      operation,
      argument: path,
      expected: 'UTF-8 text',
      actual: (error as Error).message,
    });
  }
}
