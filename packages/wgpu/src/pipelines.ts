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

/** A shader as text: what `compiledShaders` lists and `precompile` takes (plain data, to store or post). */
export interface ShaderText {
  readonly key: string;
  readonly kernel: string;
  readonly code: string;
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
  /** The text of every shader compiled, by key, in the order compiled. */
  readonly #texts = new Map<string, ShaderText>();
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
    this.#texts.set(source.key, { key: source.key, kernel: source.kernel, code });
    return compiled;
  }

  /** The shaders compiled so far, in the order compiled: what a later `precompile` (another visit, say) can take. */
  compiledShaders(): ShaderText[] {
    return [...this.#texts.values()];
  }

  /**
   * Compiles `shaders` with `createComputePipelineAsync`, all requested at
   * once (the browser may compile them in parallel, and the caller's thread
   * is not held as `get`'s synchronous compile holds it), each kept as `get`
   * would keep it; a key compiled already is skipped. Resolves with how many
   * were compiled; `onCompiled` is called after each. A shader that fails to
   * compile is a KernelCompileError naming its key, and is not kept.
   */
  async precompile(
    shaders: readonly ShaderText[],
    onCompiled?: (done: number, total: number) => void,
  ): Promise<number> {
    const wanted = [...new Map(shaders.map((s) => [s.key, s])).values()].filter(
      (s) => !this.#pipelines.has(s.key),
    );
    let done = 0;
    await Promise.all(
      wanted.map(async (shader) => {
        const module = this.#device.createShaderModule({ label: shader.key, code: shader.code });
        let pipeline: GPUComputePipeline;
        try {
          pipeline = await this.#device.createComputePipelineAsync({
            label: shader.key,
            layout: 'auto',
            compute: { module, entryPoint: 'main' },
          });
        } catch (error) {
          const info = await module.getCompilationInfo();
          const log = info.messages
            .map((m) => `${m.type} at ${m.lineNum}:${m.linePos}: ${m.message}`)
            .join('\n');
          throw new KernelCompileError(
            `WGSL of '${shader.key}' failed to compile`,
            `${log || (error as Error).message}\n---\n${shader.code}`,
            { operation: shader.kernel },
          );
        }
        this.#compiles++;
        // A synchronous get() of the same key while this compiled keeps its own pipeline.
        if (!this.#pipelines.has(shader.key)) {
          this.#pipelines.set(shader.key, { pipeline, layout: pipeline.getBindGroupLayout(0) });
          this.#texts.set(shader.key, shader);
        }
        onCompiled?.(++done, wanted.length);
      }),
    );
    return wanted.length;
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
