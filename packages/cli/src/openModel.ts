import {
  type Backend,
  backendOptionsFromEnvironment,
  createBackend,
  OutOfMemoryError,
  probeBackends,
} from '@rayo/core';
import { inspectModelFiles, TextModel, type TextModelLoadOptions } from '@rayo/text';
import type { CliIo } from './io.js';
import type { ModelOptions } from './options.js';
import { LoadProgressBar } from './progressBar.js';

/** The backend `auto` picks: the first of cuda and wgpu that can run here, else cpu. */
async function autoBackend(): Promise<string> {
  for (const status of await probeBackends(['cuda', 'wgpu'])) if (status.available) return status.name;
  return 'cpu';
}

function size(bytes: number): string {
  return bytes >= 1e9 ? `${(bytes / 1e9).toFixed(2)} GB` : `${(bytes / 1e6).toFixed(1)} MB`;
}

/**
 * Creates the backend (found by name at run time: `@rayo/wgpu` and
 * `@rayo/cuda-ptx` are optional peers), with the tuning switches the
 * environment names, and loads the model onto it with a
 * progress bar on stderr (`copies` times, for a server's slots). A model that does not fit the device is an
 * OutOfMemoryError that says how large it is and what to try.
 */
export async function openModel(
  options: ModelOptions,
  io: CliIo,
  copies = 1,
): Promise<{ backend: Backend; model: TextModel; models: readonly TextModel[] }> {
  const name = options.backend === 'auto' ? await autoBackend() : options.backend;
  // The backend's tuning switches named by the environment, as every rayo program takes them.
  const backend = await createBackend(name, await backendOptionsFromEnvironment(name, io.env ?? {}));
  const bar = options.quiet
    ? undefined
    : new LoadProgressBar(io.stderr, `loading ${options.model} on ${backend.name} (${backend.info.device})`);
  const loadOptions: TextModelLoadOptions = {
    ...(options.maxSequence !== undefined ? { maxSequence: options.maxSequence } : {}),
    ...(options.dtype !== undefined ? { weightDtype: options.dtype } : {}),
    ...(options.kvDtype !== undefined ? { kvCacheDtype: options.kvDtype } : {}),
    ...(options.quant !== undefined ? { weightFormat: options.quant } : {}),
    ...(options.activations !== undefined ? { quantizedActivations: options.activations } : {}),
    ...(bar ? { onProgress: (p) => bar.update(p) } : {}),
  };
  const models: TextModel[] = [];
  try {
    // Copies share nothing: each holds its own weights and KV cache (a slot of `rayo serve`).
    for (let i = 0; i < copies; i++) models.push(await TextModel.load(backend, options.model, loadOptions));
    bar?.done();
    return { backend, model: models[0]!, models };
  } catch (error) {
    bar?.abandon();
    for (const m of models) m.dispose();
    backend.dispose();
    if (error instanceof OutOfMemoryError) {
      const files = await inspectModelFiles(options.model).catch(() => undefined);
      throw new OutOfMemoryError(
        `the model does not fit on ${backend.info.device} (the ${backend.name} backend)` +
          (files ? `: its weights take ${size(files.bytesTotal)} as stored` : ''),
        {
          operation: 'TextModel.load',
          argument: '--model',
          expected:
            'weights and KV cache within the device memory; try --quant q4g32 (a folder), --dtype bf16, ' +
            `a smaller --max-sequence${options.maxSequence ? ` (now ${options.maxSequence})` : ''}, or another --backend`,
          actual: error.message,
          cause: error,
        },
      );
    }
    throw error;
  }
}
