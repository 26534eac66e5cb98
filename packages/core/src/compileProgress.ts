/** A kernel compile slow enough to be worth a word (a WebGPU pipeline on a software adapter). */
export interface SlowCompile {
  /** The compiled kernel variant's key, e.g. `matmul/tiled/64x64`. */
  readonly key: string;
  /** The kernel it belongs to. */
  readonly kernel: string;
  /** How long it took, in milliseconds. */
  readonly milliseconds: number;
}

export type SlowCompileHandler = (compile: SlowCompile) => void;

/** Where a progress line goes: a stream such as Node's `process.stderr`. */
export interface ProgressOutput {
  write(text: string): unknown;
  /** A terminal: the line is rewritten in place; otherwise each update is a line of its own. */
  readonly isTTY?: boolean;
}

/** A progress line of slow compiles, for a program to show while a backend compiles its kernels. */
export interface CompileProgress {
  /** Give it to the backend: `onSlowBackendCompile(name, progress.onSlowCompile)`. */
  readonly onSlowCompile: SlowCompileHandler;
  /**
   * Text the program has written at the start of the current line (e.g. the
   * case being run), which an update keeps in front of it; '' for none.
   */
  lead(text: string): void;
  /**
   * Before the program writes more: on a terminal, takes the progress text
   * off the line again (leaving the lead); elsewhere nothing.
   */
  settle(): void;
}

const seconds = (ms: number) => (ms / 1000).toFixed(1);

/**
 * A progress line of slow compiles on `out`: rewritten in place on a
 * terminal, one line per compile elsewhere (a log file keeps them all).
 */
export function compileProgress(out: ProgressOutput): CompileProgress {
  let lead = '';
  let showing = false;
  let count = 0;
  let total = 0;
  return {
    onSlowCompile({ key, milliseconds }) {
      count++;
      total += milliseconds;
      const text =
        `compiling kernels (a slow adapter compiles each once, on first use): ${count} so far, ` +
        `${seconds(total)} s; last ${key} (${seconds(milliseconds)} s)`;
      if (out.isTTY) {
        out.write(`\r\x1b[K${lead}${text}`);
        showing = true;
      } else {
        // The lead's line is ended, the update written, and the lead begun again.
        out.write(`${lead ? '\n' : ''}${text}\n${lead}`);
      }
    },
    lead(text) {
      lead = text;
    },
    settle() {
      if (!showing) return;
      out.write(`\r\x1b[K${lead}`);
      showing = false;
    },
  };
}
