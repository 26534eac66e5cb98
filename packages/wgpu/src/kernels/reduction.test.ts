import { argmax, createCpuBackend } from '@rayo/core';
import { compareOutputs, Rng } from '@rayo/core/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { WgpuBackend } from '../backend.js';
import { backendProvider } from '../index.js';

const unavailable = await backendProvider.probe();
const needsAdapter = unavailable && process.env.CI !== 'true' ? describe.skip : describe;

// What the conformance cases cannot write: NaNs with the sign bit set (a
// host copy through numbers may canonicalise them), and rows long enough
// that every invocation of a workgroup loops many times.
needsAdapter('wgpu argmax beyond the conformance cases', () => {
  let backend: WgpuBackend;
  const cpu = createCpuBackend();
  beforeAll(async () => {
    backend = await WgpuBackend.create();
  });
  afterAll(() => {
    backend.dispose();
    cpu.dispose();
  });

  async function check(shape: number[], special?: (x: Float32Array, bits: Uint32Array) => void) {
    const rng = new Rng(shape.reduce((a, b) => a * 31 + b, 7));
    const x = Float32Array.from(
      { length: shape.reduce((a, b) => a * b, 1) },
      () => rng.uniform(-1, 1) || 0.375,
    );
    special?.(x, new Uint32Array(x.buffer));
    const run = async (b: WgpuBackend | typeof cpu) => {
      using input = b.upload(x, shape);
      using y = b.run(argmax, [input], {})[0]!;
      return await y.read();
    };
    expect(compareOutputs('i32', await run(backend), await run(cpu))).toBeUndefined();
  }

  it('no rows: nothing to dispatch', () => check([0, 16]));

  it('NaN with its sign bit set counts as NaN, in vec4 and scalar rows', async () => {
    for (const n of [516, 517]) {
      await check([3, n], (x, bits) => {
        x[5] = Number.POSITIVE_INFINITY;
        bits[300] = 0xffc00000;
        bits[n + 400] = 0xff800001;
        x[n + 401] = Number.NaN;
        x[2 * n + 7] = -0;
      });
    }
  });

  it("a decoder's logits (one row of 128,256) go in 16 parts over as many workgroups, then their pairs", async () => {
    const fresh = await WgpuBackend.create();
    try {
      const rng = new Rng(11);
      const n = 128256;
      const x = Float32Array.from({ length: n }, () => rng.uniform(-1, 1));
      // The maximum twice, in the last part and in the first: the lower index wins.
      x[n - 5] = 3;
      x[70] = 3;
      using input = fresh.upload(x, [1, n]);
      using y = fresh.run(argmax, [input], {})[0]!;
      expect(Array.from((await y.read()) as Int32Array)).toEqual([70]);
      const keys = fresh.pipelines.compiledShaders().map((s) => s.key);
      expect(keys.filter((key) => key.startsWith('reduction/argmax/'))).toEqual([
        'reduction/argmax/f32/split/w4/u4/wg256',
        'reduction/argmax/pairs/t2/wg256',
      ]);
    } finally {
      fresh.dispose();
    }
  });

  it('rows of 2^18 + 4 and 2^18 + 3 with the maximum twice, late', async () => {
    for (const n of [262148, 262147]) {
      await check([2, n], (x) => {
        for (const j of [n - 1, 200001, 150003]) {
          x[j] = 2;
          x[n + j - 3] = 2;
        }
      });
    }
  });
});
