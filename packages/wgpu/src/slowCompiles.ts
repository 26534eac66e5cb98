/** A pipeline compile that took long enough to be worth a word (see `onSlowPipelineCompile`). */
export interface SlowPipelineCompile {
  /** The shader's key, e.g. `matmul/tiled/64x64`. */
  readonly key: string;
  /** The kernel it belongs to. */
  readonly kernel: string;
  /** How long creating its shader module and pipeline took, in milliseconds. */
  readonly milliseconds: number;
}

/** Compiles at least this long are reported: a hardware adapter compiles in milliseconds. */
export const SLOW_PIPELINE_COMPILE_MS = 2000;

export type SlowPipelineCompileHandler = (compile: SlowPipelineCompile) => void;

let warned = false;

/** Forgets that the default handler has warned (test files share this module). */
export function forgetSlowCompileWarning(): void {
  warned = false;
}

/**
 * The default handler: one line on stderr, at the first slow compile of the
 * process, saying why nothing seems to happen (a software adapter, such as
 * lavapipe or SwiftShader, compiles every kernel and shape for seconds on
 * first use) and how to silence it.
 */
export const warnOnceOfSlowCompiles: SlowPipelineCompileHandler = ({ key, milliseconds }) => {
  if (warned) return;
  warned = true;
  console.warn(
    `@rayo/wgpu: compiling the pipeline '${key}' took ${(milliseconds / 1000).toFixed(1)} s. ` +
      'This adapter compiles shaders slowly (a software one such as lavapipe or SwiftShader does): ' +
      'each kernel and shape compiles once, on first use, so a first run can take minutes; later calls reuse them. ' +
      'onSlowPipelineCompile(handler) reports each slow compile (for a progress line); onSlowPipelineCompile(undefined) silences this.',
  );
};

let handler: SlowPipelineCompileHandler | undefined = warnOnceOfSlowCompiles;

/**
 * Sets what happens when a pipeline takes `SLOW_PIPELINE_COMPILE_MS` or more
 * to compile, for every WebGPU backend of the program: by default
 * `warnOnceOfSlowCompiles`; a handler is called for each such compile (e.g.
 * to show a progress line); `undefined` reports nothing.
 */
export function onSlowPipelineCompile(next: SlowPipelineCompileHandler | undefined): void {
  handler = next;
}

/** Called by the pipeline cache with each compile's duration. */
export function compiled(key: string, kernel: string, milliseconds: number): void {
  if (milliseconds >= SLOW_PIPELINE_COMPILE_MS) handler?.({ key, kernel, milliseconds });
}
