import { InvalidArgumentError } from '@rayo/core';
import { type OpenFile, readWholeFile } from '../checkpoint/randomAccessFile.js';

/**
 * Largest JSON file a loader reads (`config.json`, `model.safetensors.index.json`):
 * 16 MiB, above the largest published shard index (under 10 MiB), far below
 * what would strain memory. A larger file is refused before it is read.
 */
export const MAX_JSON_FILE_BYTES = 16 * 2 ** 20;

/** Deepest nesting of objects and arrays a loader's JSON may have (configs nest 3 or 4 levels). */
export const MAX_JSON_DEPTH = 64;

function notJson(api: string, path: string, error: unknown): InvalidArgumentError {
  return new InvalidArgumentError('file is not JSON', {
    operation: api,
    argument: path,
    expected: 'a UTF-8 JSON document',
    actual: (error as Error).message,
  });
}

/** How deeply `text` nests objects and arrays (brackets inside strings not counted); stops past `limit`. */
function nestingDepth(text: string, limit: number): number {
  let depth = 0;
  let deepest = 0;
  for (let i = 0; i < text.length && deepest <= limit; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x22) {
      for (i++; i < text.length && text.charCodeAt(i) !== 0x22; i++) if (text.charCodeAt(i) === 0x5c) i++;
    } else if (c === 0x5b || c === 0x7b) {
      deepest = Math.max(deepest, ++depth);
    } else if (c === 0x5d || c === 0x7d) {
      depth--;
    }
  }
  return deepest;
}

/**
 * A JSON file of at most `maxBytes` (default `MAX_JSON_FILE_BYTES`) nesting
 * at most `MAX_JSON_DEPTH` deep, parsed; anything else is a RayoError naming
 * the file.
 */
export async function readJsonFile(
  openFile: OpenFile,
  path: string,
  api: string,
  maxBytes = MAX_JSON_FILE_BYTES,
): Promise<unknown> {
  const bytes = await readWholeFile(await openFile(path), maxBytes, api);
  let text: string;
  try {
    text = new TextDecoder('utf-8', { fatal: true }).decode(bytes);
  } catch (error) {
    throw notJson(api, path, error);
  }
  // Checked before parsing: deep nesting overflows the stack of JSON.parse and of whatever reads the result.
  const depth = nestingDepth(text, MAX_JSON_DEPTH);
  if (depth > MAX_JSON_DEPTH) {
    throw new InvalidArgumentError('the JSON file nests too deeply', {
      operation: api,
      argument: path,
      expected: `at most ${MAX_JSON_DEPTH} levels of objects and arrays`,
      actual: `more than ${MAX_JSON_DEPTH}`,
    });
  }
  try {
    return JSON.parse(text);
  } catch (error) {
    throw notJson(api, path, error);
  }
}
