// The messages between a page (`TextModelWorker`) and the worker that holds
// the model (`serveTextModel`): plain objects, so that postMessage clones them.
import type { ChatMessage, GenerateTextOptions, GenerationStats, TextModelLoadOptions } from '@rayo/text';

/** Where a page and a worker meet: a `Worker`, the worker's `self`, or a `MessagePort`. */
export interface MessageEndpoint {
  postMessage(message: unknown): void;
  addEventListener(type: 'message', listener: (event: { data: unknown }) => void): void;
  removeEventListener(type: 'message', listener: (event: { data: unknown }) => void): void;
}

/** What a load has done so far: copying files in, putting weights on the device, compiling kernels. */
export type WorkerLoadProgress =
  | { readonly stage: 'download'; readonly bytesReceived: number }
  | {
      readonly stage: 'weights';
      readonly tensorsLoaded: number;
      readonly tensorsTotal: number;
      readonly bytesLoaded: number;
      readonly bytesTotal: number;
    }
  /** Shaders the last load compiled, compiled ahead with createComputePipelineAsync while the weights load. */
  | { readonly stage: 'compile'; readonly compiled: number; readonly total: number }
  | { readonly stage: 'warmup' };

export interface WorkerLoadOptions
  extends Pick<TextModelLoadOptions, 'maxSequence' | 'weightDtype' | 'kvCacheDtype'> {
  /** Keep the files in the browser's model cache, and read them from it when there (default true). */
  readonly cache?: boolean;
  /**
   * Runs one token through the model after loading (default true), so that
   * every kernel of prefill and decoding is compiled during the load rather
   * than before the first token of the first answer. Skipped where the
   * cache listed the shaders of the model's last load and they all compiled
   * ahead, as that warm-up's kernels are among them.
   */
  readonly warmup?: boolean;
}

/** What the worker says of a loaded model. */
export interface LoadedModelInfo {
  readonly url: string;
  readonly vocabSize: number;
  readonly maxSequence: number;
  readonly weightDtype: string;
  /** The backend the model runs on, e.g. `wgpu`. */
  readonly backend: string;
  /** Whether every file came from the model cache (no model request was made). */
  readonly fromCache: boolean;
  readonly chatTemplate: boolean;
  /** Shaders compiled ahead, from the list the model's last load left in the cache (0 on a first load). */
  readonly precompiled: number;
  /**
   * A GGUF file through the cache: quantized tensors uploaded as the cache
   * kept them in their device layout (`reused`) and those repacked from the
   * file and kept for the next load (`written`); `rebuilt` where the kept
   * ones were damaged, refused and made anew. Zeros otherwise.
   */
  readonly prepared: { readonly reused: number; readonly written: number; readonly rebuilt: boolean };
}

export type WorkerGenerateOptions = Omit<GenerateTextOptions, 'signal'>;

export type WorkerRequest =
  | { readonly type: 'load'; readonly id: number; readonly url: string; readonly options: WorkerLoadOptions }
  | {
      readonly type: 'generate';
      readonly id: number;
      readonly prompt: string | readonly ChatMessage[];
      readonly options: WorkerGenerateOptions;
    }
  | { readonly type: 'abort'; readonly id: number }
  | { readonly type: 'dispose'; readonly id: number };

/** A RayoError (or any error) as it crosses to the page. */
export interface SentError {
  readonly name: string;
  readonly message: string;
  readonly operation?: string;
  readonly argument?: string;
  readonly expected?: string;
  readonly actual?: string;
}

export type WorkerReply =
  | { readonly type: 'progress'; readonly id: number; readonly progress: WorkerLoadProgress }
  | { readonly type: 'loaded'; readonly id: number; readonly info: LoadedModelInfo }
  | { readonly type: 'piece'; readonly id: number; readonly text: string }
  | { readonly type: 'done'; readonly id: number; readonly stats: GenerationStats | undefined }
  | { readonly type: 'disposed'; readonly id: number }
  | { readonly type: 'error'; readonly id: number; readonly error: SentError };
