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
}

export function processIo(): CliIo {
  return {
    stdin: process.stdin,
    stdout: process.stdout,
    stderr: process.stderr,
    onInterrupt: (handler) => {
      process.on('SIGINT', handler);
      return () => process.off('SIGINT', handler);
    },
  };
}
