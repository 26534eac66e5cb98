import { add, createBackend, KernelCompileError, softmax } from '@rayo/core';
import { Rng } from '@rayo/core/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { WgpuBackend } from './backend.js';
import { backendProvider } from './index.js';

// Pipelines compiled on one device, listed as text, compiled ahead of use on
// another with createComputePipelineAsync: the second device's kernels then
// compile nothing and still compute what the reference does.
const unavailable = await backendProvider.probe();
const needsAdapter = unavailable && process.env.CI !== 'true' ? describe.skip : describe;

needsAdapter(`precompiled pipelines${unavailable ? ` (no adapter: ${unavailable})` : ''}`, () => {
  let first: WgpuBackend;
  let second: WgpuBackend;
  beforeAll(async () => {
    first = await WgpuBackend.create();
    second = await WgpuBackend.create();
  });
  afterAll(() => {
    first.dispose();
    second.dispose();
  });

  it('compiles the shaders another device used, so that its kernels compile nothing on first use', async () => {
    const rng = new Rng(7);
    const data = Float32Array.from({ length: 5 * 37 }, () => rng.normal());
    const run = async (backend: WgpuBackend) => {
      using x = backend.upload(data, [5, 37]);
      using sum = backend.run(add, [x, x])[0]!;
      using probabilities = backend.run(softmax, [sum])[0]!;
      return (await probabilities.read()) as Float32Array;
    };
    const expected = await run(first);
    const shaders = first.pipelines.compiledShaders();
    expect(shaders.map((s) => s.kernel)).toEqual(expect.arrayContaining(['add', 'softmax']));
    for (const s of shaders) expect(s.code).toMatch(/fn main/);

    const progress: [number, number][] = [];
    const compiled = await second.pipelines.precompile([...shaders, ...shaders], (done, total) =>
      progress.push([done, total]),
    );
    expect(compiled).toBe(shaders.length);
    expect(progress).toEqual(shaders.map((_, i) => [i + 1, shaders.length]));
    expect(await second.pipelines.precompile(shaders)).toBe(0);
    const before = { ...second.pipelines.stats };
    const got = await run(second);
    expect(second.pipelines.stats.misses).toBe(before.misses);
    expect(second.pipelines.stats.hits).toBeGreaterThan(before.hits);
    expect(got).toEqual(expected);
    const cpu = await createBackend('cpu');
    try {
      const reference = (await cpu
        .run(softmax, [cpu.run(add, [cpu.upload(data, [5, 37]), cpu.upload(data, [5, 37])])[0]!])[0]!
        .read()) as Float32Array;
      for (let i = 0; i < reference.length; i++) expect(got[i]).toBeCloseTo(reference[i]!, 6);
    } finally {
      cpu.dispose();
    }
    expect(
      second.pipelines
        .compiledShaders()
        .map((s) => s.key)
        .sort(),
    ).toEqual(shaders.map((s) => s.key).sort());
  });

  it('refuses a shader that does not compile, naming its key, and keeps nothing of it', async () => {
    const error = await second.pipelines
      .precompile([{ key: 'broken/one', kernel: 'broken', code: 'fn main( {' }])
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(KernelCompileError);
    expect((error as KernelCompileError).message).toContain("WGSL of 'broken/one' failed to compile");
    expect((error as KernelCompileError).operation).toBe('broken');
    expect(second.pipelines.compiledShaders().map((s) => s.key)).not.toContain('broken/one');
  });
});
