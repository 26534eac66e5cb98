import { add, biasAdd, createCpuBackend, type HostArray, mul, swigluBackward } from '@rayo/core';
import { compareOutputs, Rng } from '@rayo/core/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { WgpuBackend } from './backend.js';
import { backendProvider } from './index.js';

const unavailable = await backendProvider.probe();
const needsAdapter = unavailable && process.env.CI !== 'true' ? describe.skip : describe;

function random(rng: Rng, n: number): Float32Array {
  return Float32Array.from({ length: n }, () => rng.uniform(-1, 1) || 0.5);
}

// A 4 KiB binding limit forces operands of more than 1024 f32 to be bound in
// pieces at aligned offsets, all on the device.
needsAdapter('operands larger than one storage binding', () => {
  let gpu: WgpuBackend;
  const cpu = createCpuBackend();
  beforeAll(async () => {
    gpu = await WgpuBackend.create({ maxBindingBytes: 4096 });
  });
  afterAll(() => gpu.dispose());

  const cases = [
    { name: 'add, same shapes', spec: add, shapes: [[5003], [5003]] },
    { name: 'mul, large a with a broadcast row', spec: mul, shapes: [[41, 127], [127]] },
    { name: 'add, broadcast scalar', spec: add, shapes: [[1], [3001]] },
    { name: 'biasAdd', spec: biasAdd, shapes: [[50, 97], [97]] },
    {
      name: 'swigluBackward, three inputs and two outputs',
      spec: swigluBackward,
      shapes: [[2053], [2053], [2053]],
    },
  ] as const;

  for (const c of cases) {
    it(`${c.name} matches the cpu backend`, async () => {
      const rng = new Rng(c.shapes.flat().reduce((a: number, b: number) => a * 31 + b, 7));
      const data = c.shapes.map((s) =>
        random(
          rng,
          s.reduce((a: number, b: number) => a * b, 1),
        ),
      );
      const expected = cpu.run(
        c.spec,
        data.map((d, i) => cpu.upload(d, c.shapes[i]!)),
      );
      const actual = gpu.run(
        c.spec,
        data.map((d, i) => gpu.upload(d, c.shapes[i]!)),
      );
      expect(actual.some((t) => t.byteLength > gpu.maxBindingBytes)).toBe(true);
      for (let i = 0; i < expected.length; i++) {
        const mismatch = compareOutputs(
          'f32',
          (await actual[i]!.read()) as HostArray,
          await expected[i]!.read(),
        );
        expect(mismatch).toBeUndefined();
      }
    });
  }
});
