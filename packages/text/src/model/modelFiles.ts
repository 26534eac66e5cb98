import { InvalidArgumentError } from '@rayo/core';
import {
  GgufFile,
  type GgufMetadata,
  joinModelPath as join,
  metadataInteger,
  type OpenFile,
  openNodeFile,
  SafetensorsFile,
} from '@rayo/train';
import { readOptionalJsonObject } from '../files/boundedFiles.js';

interface ModelFileTotals {
  readonly tensorsTotal: number;
  readonly bytesTotal: number;
}

/** A model on disk: a Hugging Face folder or a GGUF file, with what its headers say. */
export type ModelFiles =
  | (ModelFileTotals & {
      readonly kind: 'huggingface';
      readonly path: string;
      /** `max_position_embeddings` of config.json, where it says. */
      readonly contextLength: number | undefined;
    })
  | (ModelFileTotals & {
      readonly kind: 'gguf';
      readonly path: string;
      readonly metadata: GgufMetadata;
      /** The parsed header, for the loader (`loadGgufLlama`'s `header`). */
      readonly header: GgufFile;
      /** `<architecture>.context_length`, where the metadata says. */
      readonly contextLength: number | undefined;
    });

const KERNEL = 'TextModel.load';

/** The tensors and bytes of the safetensors files of a folder (headers only). */
async function safetensorsTotals(dir: string, openFile: OpenFile): Promise<ModelFileTotals> {
  const index = await readOptionalJsonObject(
    join(dir, 'model.safetensors.index.json'),
    KERNEL,
    undefined,
    openFile,
  );
  const weightMap = (index?.weight_map ?? undefined) as Record<string, string> | undefined;
  const files = weightMap ? [...new Set(Object.values(weightMap))] : ['model.safetensors'];
  let tensors = 0;
  let bytes = 0;
  for (const name of files) {
    let raw: Awaited<ReturnType<OpenFile>>;
    try {
      raw = await openFile(join(dir, name));
    } catch (error) {
      // The loader names a missing weights file in its own words.
      if ((error as NodeJS.ErrnoException).code === 'ENOENT') continue;
      throw error;
    }
    try {
      const file = await SafetensorsFile.open(raw);
      for (const entry of file.entries.values()) {
        tensors++;
        bytes += entry.end - entry.begin;
      }
    } finally {
      await raw.close();
    }
  }
  return { tensorsTotal: tensors, bytesTotal: bytes };
}

/** A Hugging Face folder's config context and weight totals (headers only). */
async function huggingFaceFiles(path: string, openFile: OpenFile): Promise<ModelFiles> {
  const config = await readOptionalJsonObject(join(path, 'config.json'), KERNEL, undefined, openFile);
  const context = config?.max_position_embeddings;
  return {
    kind: 'huggingface',
    path,
    contextLength: typeof context === 'number' ? context : undefined,
    ...(await safetensorsTotals(path, openFile)),
  };
}

/** A GGUF file's metadata, context and weight totals (its header only). */
async function ggufFiles(path: string, openFile: OpenFile): Promise<ModelFiles> {
  const file = await GgufFile.open(await openFile(path));
  try {
    const arch = file.metadata.get('general.architecture');
    const contextLength =
      arch?.type === 'string' ? metadataInteger(file.metadata, `${arch.value}.context_length`) : undefined;
    let bytes = 0;
    for (const t of file.tensors.values()) bytes += t.byteLength;
    return {
      kind: 'gguf',
      path,
      metadata: file.metadata,
      header: file,
      contextLength,
      tensorsTotal: file.tensors.size,
      bytesTotal: bytes,
    };
  } finally {
    await file.close();
  }
}

/** Whether a path or URL names a `.gguf` file (a URL's query and fragment aside). */
export function namesGguf(path: string): boolean {
  return path.replace(/[?#].*$/, '').endsWith('.gguf');
}

/**
 * What `path` is: a folder (a Hugging Face model) or a `.gguf` file, with
 * its context length and the tensors and bytes its weights hold, read from
 * headers only. Anything else is an InvalidArgumentError that says what a
 * model path must be. With `openFile` (a URL opener, say) nothing is asked
 * of a file system: a path ending in `.gguf` is a GGUF file, anything else
 * a folder of Hugging Face files.
 */
export async function inspectModelFiles(path: string, openFile?: OpenFile): Promise<ModelFiles> {
  if (openFile !== undefined) {
    return namesGguf(path) ? ggufFiles(path, openFile) : huggingFaceFiles(path, openFile);
  }
  const { stat } = await import('node:fs/promises');
  const info = await stat(path).catch((error: NodeJS.ErrnoException) => {
    if (error.code === 'ENOENT') return undefined;
    throw error;
  });
  if (info?.isDirectory()) return huggingFaceFiles(path, openNodeFile);
  if (info?.isFile() && path.endsWith('.gguf')) return ggufFiles(path, openNodeFile);
  throw new InvalidArgumentError(
    info ? 'the model path is neither a folder nor a .gguf file' : 'the model path does not exist',
    {
      operation: KERNEL,
      argument: path,
      expected:
        'a Hugging Face model folder (config.json, model.safetensors, tokenizer.json) or a .gguf file',
      actual: info ? 'a file without the .gguf extension' : 'no such file or folder',
    },
  );
}
