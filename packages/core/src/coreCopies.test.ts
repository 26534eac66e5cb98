import { describe, expect, it, vi } from 'vitest';
import { DuplicateCoreError } from './errors.js';
import { KernelTable } from './kernelCall.js';
import { relu } from './kernels/index.js';
import { createBackend } from './registry.js';
import { CORE_VERSION } from './version.js';

// A second copy of core, as a package manager installs one nested under a
// backend whose peer range the first copy misses: the same modules evaluated
// again share nothing with these but the realm's global registry.
async function secondCopy() {
  vi.resetModules();
  const registry = await import('./registry.js');
  return { registry };
}

describe('two copies of core', () => {
  it('a backend registered with the other copy is a DuplicateCoreError naming both', async () => {
    const other = await secondCopy();
    other.registry.registerBackend(
      { name: 'nested', probe: async () => undefined, create: async () => ({}) as never },
      { replace: false },
    );
    const error = await createBackend('nested').catch((e: unknown) => e);
    expect(error).toBeInstanceOf(DuplicateCoreError);
    const { message } = error as DuplicateCoreError;
    expect(message).toContain("backend 'nested' was registered with another copy of @rayo/core");
    expect(message).toContain(`this one ${CORE_VERSION} at `);
    expect(message).toMatch(/npm dedupe/);
  });

  it("asking a backend built on the other copy for this copy's spec is a DuplicateCoreError", async () => {
    await secondCopy();
    const { KernelTable: OtherTable } = await import('./kernelCall.js');
    const { relu: otherRelu } = await import('./kernels/index.js');
    const table = new OtherTable('test', 'TEST', [{ spec: otherRelu }]);
    expect(table.get(otherRelu).spec).toBe(otherRelu);
    // The error is the other copy's class: `instanceof` is one more thing two copies break.
    expect(() => table.get(relu)).toThrow(expect.objectContaining({ name: 'DuplicateCoreError' }));
    expect(() => table.get(relu)).toThrow(
      /test backend cannot run this 'relu' spec: two copies of @rayo\/core/,
    );
    // Within one copy nothing changes.
    expect(new KernelTable('test', 'TEST', [{ spec: relu }]).get(relu).spec).toBe(relu);
  });
});
