import { InvalidArgumentError } from '@rayo/core';
import { type OpenFile, readWholeFile } from '../checkpoint/randomAccessFile.js';

/**
 * Largest JSON file a loader reads (`config.json`, `model.safetensors.index.json`):
 * 16 MiB, above the largest published shard index (under 10 MiB), far below
 * what would strain memory. A larger file is refused before it is read.
 */
export const MAX_JSON_FILE_BYTES = 16 * 2 ** 20;

/** A JSON file of at most `MAX_JSON_FILE_BYTES`, parsed; anything else is a RayoError naming the file. */
export async function readJsonFile(openFile: OpenFile, path: string, api: string): Promise<unknown> {
  const bytes = await readWholeFile(await openFile(path), MAX_JSON_FILE_BYTES, api);
  try {
    return JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(bytes));
  } catch (error) {
    throw new InvalidArgumentError('file is not JSON', {
      kernel: api,
      argument: path,
      expected: 'a UTF-8 JSON document',
      actual: (error as Error).message,
    });
  }
}
