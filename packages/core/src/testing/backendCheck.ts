import type { Backend } from '../backend.js';

/** One named, independent check. `run` rejects with a descriptive error on failure. */
export interface ConformanceCheck {
  readonly name: string;
  /** `api`, `coverage`, or a kernel family. */
  readonly group: string;
  /**
   * For a valid case of a kernel: the kernel, its variant and the elements of
   * its inputs and outputs (see `sampleConformance`).
   */
  readonly kernelCase?: { readonly kernel: string; readonly variant: string; readonly elements: number };
  run(): Promise<void>;
}

/** Makes checks of one group that each run on the backend `getBackend` gives. */
export function backendCheck(
  group: string,
  getBackend: () => Promise<Backend>,
): (name: string, run: (backend: Backend) => Promise<void>) => ConformanceCheck {
  return (name, run) => ({ name, group, run: async () => run(await getBackend()) });
}
