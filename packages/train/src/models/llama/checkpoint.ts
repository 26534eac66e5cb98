import { InvalidArgumentError, RayoError } from '@rayo/core';
import type { OpenFile } from '../../checkpoint/randomAccessFile.js';
import { SafetensorsFile } from '../../checkpoint/safetensorsFile.js';
import { namingFile, nodeErrorCode } from '../../io/fileError.js';
import { openNodeFileWithin } from '../../io/folderFile.js';
import { joinModelPath as join } from '../../io/httpRangeFile.js';
import { readJsonFile } from '../../io/jsonFile.js';
import { type LlamaConfig, parseLlamaConfig } from './config.js';

export interface LlamaCheckpointOptions {
  /** How files are opened (default: Node file handles); e.g. to count reads. */
  readonly openFile?: OpenFile;
  /** Largest single read from a weight file, in bytes (default 64 MiB). */
  readonly maxReadBytes?: number;
}

/** A checkpoint directory, opened: its config and, per tensor name, the file holding it (headers only read). */
export interface LlamaCheckpoint {
  readonly config: LlamaConfig;
  readonly tensors: ReadonlyMap<string, SafetensorsFile>;
  close(): Promise<void>;
}

const KERNEL = 'loadLlama';
const INDEX = 'model.safetensors.index.json';
const SINGLE = 'model.safetensors';

async function exists(openFile: OpenFile, path: string): Promise<boolean> {
  try {
    await (await openFile(path)).close();
    return true;
  } catch (error) {
    if (nodeErrorCode(error) === 'ENOENT') return false;
    throw error;
  }
}

/** Whether `name` is a plain file name: not empty, not `.` or `..`, no separator, no NUL byte. */
function isPlainFileName(name: unknown): name is string {
  return (
    typeof name === 'string' && name.length > 0 && name !== '.' && name !== '..' && !/[/\\\0]/.test(name)
  );
}

/** The shard file of each tensor, from an index's `weight_map`. */
function weightMapOf(index: unknown, path: string): Map<string, string> {
  const map = (index as { weight_map?: unknown } | null)?.weight_map;
  if (typeof map !== 'object' || map === null || Array.isArray(map)) {
    throw new InvalidArgumentError('the index has no weight_map', {
      operation: KERNEL,
      argument: path,
      expected: '{ "weight_map": { tensor name: shard file } }',
      actual: String(JSON.stringify(map)).slice(0, 200),
    });
  }
  const entries = Object.entries(map as Record<string, unknown>);
  for (const [name, file] of entries) {
    if (!isPlainFileName(file)) {
      throw new InvalidArgumentError(`the index maps '${name}' to an invalid shard`, {
        operation: KERNEL,
        argument: path,
        expected: 'a file name in the checkpoint directory (not empty, . or .., no separator or NUL)',
        actual: JSON.stringify(file),
      });
    }
  }
  return new Map(entries as [string, string][]);
}

/**
 * Opens a Hugging Face Llama checkpoint directory: `config.json`, and either
 * `model.safetensors` or a sharded `model.safetensors.index.json` with its
 * shards. Only the headers are read here; every tensor of every file is
 * mapped to its file, and an index that disagrees with its shards is an
 * error (a tensor the index names but its shard lacks, or a tensor no index
 * entry names).
 */
export async function openLlamaCheckpoint(
  dir: string,
  options: LlamaCheckpointOptions = {},
): Promise<LlamaCheckpoint> {
  const openFile = options.openFile ?? openNodeFileWithin(dir, KERNEL);
  const configPath = join(dir, 'config.json');
  const configJson = await readJsonFile(openFile, configPath, KERNEL);
  let config: LlamaConfig;
  try {
    config = parseLlamaConfig(configJson);
  } catch (error) {
    throw namingFile(error, configPath);
  }
  const indexPath = join(dir, INDEX);
  const sharded = await exists(openFile, indexPath);
  const weightMap = sharded
    ? weightMapOf(await readJsonFile(openFile, indexPath, KERNEL), indexPath)
    : undefined;
  const fileNames = weightMap ? [...new Set(weightMap.values())].sort() : [SINGLE];
  const files: SafetensorsFile[] = [];
  const close = async () => {
    for (const f of files) await f.file.close();
  };
  try {
    const tensors = new Map<string, SafetensorsFile>();
    for (const name of fileNames) {
      const raw = await openFile(join(dir, name));
      let file: SafetensorsFile;
      try {
        file = await SafetensorsFile.open(raw, { maxReadBytes: options.maxReadBytes });
      } catch (error) {
        await raw.close();
        throw error;
      }
      files.push(file);
      for (const tensor of file.entries.keys()) {
        const mapped = weightMap?.get(tensor);
        if (weightMap && mapped !== name) {
          throw new RayoError(`tensor '${tensor}' of shard ${join(dir, name)} is not where the index says`, {
            operation: KERNEL,
            argument: tensor,
            expected: mapped ? `in ${mapped}` : 'an entry in the weight_map',
            actual: `in ${name}`,
          });
        }
        tensors.set(tensor, file);
      }
    }
    for (const [tensor, shard] of weightMap ?? []) {
      if (!tensors.has(tensor)) {
        throw new RayoError(`${indexPath} names '${tensor}' but its shard lacks it`, {
          operation: KERNEL,
          argument: tensor,
          expected: `a tensor in ${join(dir, shard)}`,
          actual: 'absent',
        });
      }
    }
    return { config, tensors, close };
  } catch (error) {
    await close();
    throw error;
  }
}
