import type { BackendProvider } from '../backendProvider.js';
import { probeBackends } from '../registry.js';

/**
 * Rejects unless `createBackend(provider.name)` uses `provider` itself: what a
 * backend package's entry does on import (`registerBackend(provider, { replace:
 * false })`), so that a bundle that imports the package finds it by name. The
 * provider's `probe` is replaced during the check, so no device is needed.
 */
export async function checkRegisteredOnImport(provider: BackendProvider): Promise<void> {
  const mark = `the probe of the provider registered as '${provider.name}'`;
  const probe = provider.probe;
  provider.probe = async () => mark;
  try {
    const [status] = await probeBackends([provider.name]);
    if (status?.reason !== mark) {
      throw new Error(
        `createBackend('${provider.name}') does not use the provider its package registers on import ` +
          `(probing it gave ${status?.available ? 'available' : `'${status?.reason}'`})`,
      );
    }
  } finally {
    provider.probe = probe;
  }
}
