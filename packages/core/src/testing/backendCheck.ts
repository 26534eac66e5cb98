import type { Backend } from '../backend.js';
import type { ConformanceCheck } from './conformance.js';

/** Makes checks of one group that each run on the backend `getBackend` gives. */
export function backendCheck(
  group: string,
  getBackend: () => Promise<Backend>,
): (name: string, run: (backend: Backend) => Promise<void>) => ConformanceCheck {
  return (name, run) => ({ name, group, run: async () => run(await getBackend()) });
}
