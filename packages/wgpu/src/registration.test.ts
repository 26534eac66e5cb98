import { probeBackends } from '@rayo/core';
import { describe, expect, it, vi } from 'vitest';
import { backendProvider } from './index.js';

describe('importing the package', () => {
  it("registers its provider, so createBackend('wgpu') needs no search on disk", async () => {
    // The provider asked is this module's own object, not a copy found on disk.
    const probe = vi.spyOn(backendProvider, 'probe').mockResolvedValue('probed the registered provider');
    const [status] = await probeBackends(['wgpu']);
    expect(status).toEqual({ name: 'wgpu', available: false, reason: 'probed the registered provider' });
    expect(probe).toHaveBeenCalledOnce();
    probe.mockRestore();
  });
});
