import { createCpuBackend, partChecksumReference, quantizedWeightOf, type Tensor } from '@rayo/core';
import { describe, expect, it } from 'vitest';
import { type ChecksummingBackend, checksummingBackend, DevicePartChecks } from './devicePartChecks.js';

/** The cpu backend as one that hashes on its "device" by reading back, or that always refuses to. */
function checksumming(refuses: boolean): ChecksummingBackend {
  const cpu = createCpuBackend();
  return Object.assign(cpu, {
    partChecksums: async (tensors: readonly Tensor[]) => {
      if (refuses) throw new Error('cannot bind');
      return Uint32Array.from(
        await Promise.all(tensors.map(async (t) => partChecksumReference(await t.read()))),
      );
    },
  });
}

describe('DevicePartChecks', () => {
  const packedHost = Uint32Array.from({ length: 64 }, (_, i) => (i * 2654435761) >>> 0);
  const scalesHost = Uint16Array.from({ length: 16 }, (_, i) => 0x3c00 + i * 37);

  it.each([false, true])(
    'passes kept parts and names a changed one (the device refusing: %s)',
    async (refuses) => {
      const backend = checksumming(refuses);
      expect(checksummingBackend(backend)).toBe(backend);
      const weight = quantizedWeightOf('q4g32', 4, 128, {
        packed: backend.upload(packedHost, [4, 16], 'u32'),
        scales: backend.upload(scalesHost, [4, 4], 'f16'),
      });
      const kept = [
        { part: 'packed' as const, checksum: partChecksumReference(packedHost) },
        { part: 'scales' as const, checksum: partChecksumReference(scalesHost) },
      ];
      const good = new DevicePartChecks();
      good.check(backend, 'a', weight, kept);
      good.check(backend, 'b', weight, kept);
      expect(await good.settle()).toBeUndefined();
      const bad = new DevicePartChecks();
      bad.check(backend, 'a', weight, kept);
      bad.check(backend, 'b', weight, [kept[0]!, { part: 'scales', checksum: kept[1]!.checksum ^ 1 }]);
      expect(await bad.settle()).toEqual({
        what: 'b.scales',
        expected: kept[1]!.checksum ^ 1,
        actual: kept[1]!.checksum,
      });
      weight.dispose();
      backend.dispose();
    },
  );

  it('takes only backends that hash on their device', () => {
    expect(checksummingBackend(createCpuBackend())).toBeUndefined();
  });
});
