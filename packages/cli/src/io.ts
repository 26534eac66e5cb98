/** Where the CLI reads and writes: the process's streams, or a test's. */
export interface CliIo {
  readonly stdin: NodeJS.ReadableStream;
  readonly stdout: NodeJS.WritableStream & { readonly isTTY?: boolean };
  readonly stderr: NodeJS.WritableStream & { readonly isTTY?: boolean };
  /**
   * Subscribes to Ctrl+C (SIGINT) while a reply streams; returns the
   * unsubscribe. Tests pass their own.
   */
  readonly onInterrupt: (handler: () => void) => () => void;
  /** Environment variables naming backend tuning switches (e.g. RAYO_QGEMV_ACTIVATIONS); none when absent. */
  readonly env?: Readonly<Record<string, string | undefined>>;
}

export function processIo(): CliIo {
  return {
    stdin: process.stdin,
    stdout: process.stdout,
    stderr: process.stderr,
    env: process.env,
    onInterrupt: (handler) => {
      process.on('SIGINT', handler);
      return () => process.off('SIGINT', handler);
    },
  };
}
