import { KernelCompileError } from '@rayo/core';
import { compiled as reportCompile } from './slowCompiles.js';
import type { GPUBindGroupLayout, GPUComputePipeline, GPUDevice } from './webgpuTypes.js';

/** What a dispatch runs: a key that identifies the kernel and its specialisation, and its WGSL. */
export interface ShaderSource {
  /** e.g. `elementwise/add/wg256`: equal keys must mean equal code. */
  readonly key: string;
  readonly code: () => string;
  /** The kernel the shader belongs to, for error messages. */
  readonly kernel: string;
}

export interface CompiledPipeline {
  readonly pipeline: GPUComputePipeline;
  /** Its bind group layout, fetched once. */
  readonly layout: GPUBindGroupLayout;
}

export interface PipelineStats {
  readonly hits: number;
  readonly misses: number;
  readonly compiles: number;
}

/**
 * Compute pipelines keyed by kernel identity and specialisation (never by
 * object address), shared by every batch of one device. Compilation problems
 * surface as KernelCompileErrors carrying the WGSL compiler's messages.
 */
export class PipelineCache {
  readonly #device: GPUDevice;
  readonly #pipelines = new Map<string, CompiledPipeline>();
  #hits = 0;
  #misses = 0;
  #compiles = 0;
  /** Checks of compilation that finish asynchronously; awaited by sync(). */
  readonly #pending = new Set<Promise<void>>();
  #failure: KernelCompileError | undefined;

  constructor(device: GPUDevice) {
    this.#device = device;
  }

  get stats(): PipelineStats {
    return { hits: this.#hits, misses: this.#misses, compiles: this.#compiles };
  }

  get size(): number {
    return this.#pipelines.size;
  }

  get(source: ShaderSource): CompiledPipeline {
    const cached = this.#pipelines.get(source.key);
    if (cached) {
      this.#hits++;
      return cached;
    }
    this.#misses++;
    this.#compiles++;
    const code = source.code();
    // Dawn compiles here, synchronously: seconds per pipeline on a software adapter.
    const started = performance.now();
    this.#device.pushErrorScope('validation');
    const module = this.#device.createShaderModule({ label: source.key, code });
    const pipeline = this.#device.createComputePipeline({
      label: source.key,
      layout: 'auto',
      compute: { module, entryPoint: 'main' },
    });
    const check = this.#device.popErrorScope().then(async (error) => {
      if (!error) return;
      const info = await module.getCompilationInfo();
      const log = info.messages.map((m) => `${m.type} at ${m.lineNum}:${m.linePos}: ${m.message}`).join('\n');
      this.#pipelines.delete(source.key);
      this.#failure ??= new KernelCompileError(
        `WGSL of '${source.key}' failed to compile`,
        `${log || error.message}\n---\n${code}`,
        {
          operation: source.kernel,
        },
      );
    });
    this.#pending.add(check);
    check.finally(() => this.#pending.delete(check));
    const compiled = { pipeline, layout: pipeline.getBindGroupLayout(0) };
    reportCompile(source.key, source.kernel, performance.now() - started);
    this.#pipelines.set(source.key, compiled);
    return compiled;
  }

  get pending(): boolean {
    return this.#pending.size > 0 || this.#failure !== undefined;
  }

  /** Resolves once every compilation check finished; rejects with the first compile error. */
  async settle(): Promise<void> {
    await Promise.all(this.#pending);
    const failure = this.#failure;
    if (failure) {
      this.#failure = undefined;
      throw failure;
    }
  }
}
