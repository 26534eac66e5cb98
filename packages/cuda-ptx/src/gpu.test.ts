import { runConformanceCheck } from '@rayo/conformance';
import { add, KERNELS, KernelCompileError, relu, scale } from '@rayo/core';
import { conformanceSuite } from '@rayo/core/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CudaBackend } from './backend.js';
import { backendProvider } from './index.js';
import { PtxModule } from './ptx/module.js';

// Runs on an NVIDIA host only: everything else in this package runs without
// a GPU. Where libcuda cannot be loaded or has no device, the suite is
// skipped with the reason.
const unavailable = await backendProvider.probe();
const onGpu = unavailable === undefined ? describe : describe.skip;

onGpu(`cuda backend on a real device${unavailable ? ` (skipped: ${unavailable})` : ''}`, () => {
  let backend: CudaBackend;
  beforeAll(async () => {
    backend = await CudaBackend.create();
  });
  afterAll(() => backend?.dispose());

  it('round-trips uploads and reads of every 32-bit dtype and odd lengths', async () => {
    const values = Float32Array.from({ length: 1031 }, (_, i) => Math.sin(i) * 1e3);
    using f = backend.upload(values, [1031]);
    expect(await f.read()).toEqual(values);
    using i = backend.upload(new Int32Array([-(2 ** 31), -1, 0, 2 ** 31 - 1]), [4], 'i32');
    expect([...(await i.read())]).toEqual([-(2 ** 31), -1, 0, 2 ** 31 - 1]);
    using h = backend.upload(new Uint16Array([1, 2, 3]), [3], 'f16');
    expect([...(await h.read())]).toEqual([1, 2, 3]);
    using z = backend.zeros([5, 67]);
    expect((await z.read()).every((v) => v === 0)).toBe(true);
  });

  it('adds with broadcasting', async () => {
    using a = backend.upload(
      Float32Array.from({ length: 12 }, (_, i) => i),
      [3, 4],
    );
    using b = backend.upload([10, 20, 30, 40], [4]);
    using y = backend.run(add, [a, b])[0]!;
    expect([...(await y.read())]).toEqual([10, 21, 32, 43, 14, 25, 36, 47, 18, 29, 40, 51]);
  });

  it('replays a batch as a CUDA graph, twice, with no new modules or allocations', async () => {
    using x = backend.upload(new Float32Array(4096).fill(0.5), [4096]);
    using s = backend.empty([4096]);
    using y = backend.empty([4096]);
    const record = () => {
      const batch = backend.batch();
      for (let i = 0; i < 50; i++) {
        batch.run(scale, [x], { alpha: 2, beta: i }, { out: [s] });
        batch.run(add, [x, s], {}, { out: [y] });
      }
      return batch;
    };
    await record().submit();
    const warm = backend.counts();
    const batch = record();
    await batch.submit();
    await batch.submit();
    expect(backend.counts()).toMatchObject({ moduleLoads: warm.moduleLoads, allocations: warm.allocations });
    const values = await y.read();
    expect(values[0]).toBe(0.5 + (2 * 0.5 + 49));
    expect(values[4095]).toBe(values[0]);
  });

  it('measures device time with events', async () => {
    using x = backend.upload(new Float32Array(1 << 20).fill(1), [1 << 20]);
    backend.run(relu, [x])[0]!.dispose();
    const ms = await backend.deviceTime((runner) => {
      for (let i = 0; i < 10; i++) runner.run(relu, [x])[0]!.dispose();
    });
    expect(ms).toBeGreaterThan(0);
  });

  it('reports a JIT failure with the compiler log', () => {
    // Valid for the builder, rejected by the JIT: a register that is never declared.
    class BrokenModule extends PtxModule {
      override emit(): string {
        return super.emit().replace('ret;', 'add.u32 %r9, %r9, 1;\n  ret;');
      }
    }
    const broken = () => {
      const m = new BrokenModule();
      m.entry('broken', {}, () => {});
      return m;
    };
    let caught: unknown;
    try {
      backend.driver.loadFunction('test/broken', 'broken', broken);
    } catch (error) {
      caught = error;
    }
    expect(caught).toBeInstanceOf(KernelCompileError);
    expect((caught as KernelCompileError).log).toMatch(/error/i);
  });
});

// The conformance checks of the families implemented so far (the runner in
// @rayo/core runs the whole suite, where the missing families fail).
const suite = conformanceSuite({ create: () => CudaBackend.create() });
const families = new Set(['memory', 'elementwise']);
const checks = suite.checks.filter(
  (c) => families.has(c.group) || (c.group === 'api' && !/batch runs dependent|weight cache/.test(c.name)),
);
onGpu('conformance of the implemented families on a real device', () => {
  afterAll(() => suite.teardown());
  for (const check of checks) {
    it(`${check.group} › ${check.name}`, (context) => runConformanceCheck(check, context), 60_000);
  }
  it('covers every spec of those families', () => {
    const specs = KERNELS.filter((s) => families.has(s.family));
    expect(specs.length).toBeGreaterThan(20);
  });
});
