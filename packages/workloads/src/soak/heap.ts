import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';

let collect: (() => void) | undefined;

/**
 * A full garbage collection, so that heap samples count live objects only:
 * `globalThis.gc` where the process runs with `--expose-gc`, else the same
 * function got by switching the flag on at run time (vitest workers).
 */
export function forceGc(): void {
  if (!collect) {
    const exposed = (globalThis as { gc?: () => void }).gc;
    if (exposed) collect = exposed;
    else {
      setFlagsFromString('--expose-gc');
      collect = runInNewContext('gc') as () => void;
    }
  }
  // Twice: objects freed by finalizers of the first pass go in the second.
  collect();
  collect();
}

/** Bytes of the JavaScript heap in use after a forced collection. */
export function liveHeapBytes(): number {
  forceGc();
  return process.memoryUsage().heapUsed;
}
