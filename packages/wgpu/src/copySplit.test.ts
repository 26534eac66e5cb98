import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { WgpuBackend } from './backend.js';
import { backendProvider } from './index.js';

const unavailable = await backendProvider.probe();
const needsAdapter = unavailable && process.env.CI !== 'true' ? describe.skip : describe;

// The bench's bandwidth ceiling copies more than one binding holds on some
// devices: the copy kernel must bind such operands in pieces.
needsAdapter('copy of a tensor larger than one storage binding', () => {
  let gpu: WgpuBackend;
  beforeAll(async () => {
    gpu = await WgpuBackend.create({ maxBindingBytes: 4096 });
  });
  afterAll(() => gpu.dispose());

  it('copies every element, into a new tensor and into a given one', async () => {
    const n = 5003;
    const values = Float32Array.from({ length: n }, (_, i) => i * 0.5 - 7);
    using src = gpu.upload(values, [n]);
    expect(src.byteLength).toBeGreaterThan(gpu.maxBindingBytes);
    using fresh = gpu.copy(src);
    using given = gpu.zeros([n]);
    gpu.copy(src, given);
    expect(Array.from(await fresh.read())).toEqual(Array.from(values));
    expect(Array.from(await given.read())).toEqual(Array.from(values));
  });
});
