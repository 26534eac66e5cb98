import { runConformanceCheck } from '@rayo/conformance';
import {
  type AnyKernelSpec,
  add,
  createCpuBackend,
  fill,
  gelu,
  KERNELS,
  type Shape,
  swigluBackward,
  transpose,
} from '@rayo/core';
import { compareOutputs, conformanceSuite, sampleConformance } from '@rayo/core/testing';
import { FakeLibCuda, PtxInterpreter, seededUniform } from '@rayo/cuda-testkit';
import { afterAll, describe, expect, it } from 'vitest';
import { CudaBackend } from './backend.js';
import { CudaDriver } from './driver/driver.js';
import { CU_DEVICE_ATTRIBUTE } from './driver/libcuda.js';

// The conformance suite's checks for the kernel families this backend
// implements, run without a GPU: the backend drives the fake libcuda, which
// executes the generated PTX in the interpreter. This checks the kernels'
// PTX, their launch arguments and the backend against the reference; what it
// cannot check (the hardware's own ex2 rounding, real concurrency, JIT) the
// GPU test and the conformance runner on an NVIDIA host do.

const fake = new FakeLibCuda();
fake.memoryLimit = 4 * 2 ** 30;
new PtxInterpreter(fake).attach();
const backend = new CudaBackend(new CudaDriver(fake));
const suite = conformanceSuite({ create: () => backend });

const families = new Set(KERNELS.filter((s) => backend.supports(s.name)).map((s) => s.family));
const checks = suite.checks.filter((c) => {
  // The replay check needs only the decoding families, which this backend has.
  if (c.group === 'api' || c.group === 'contract' || c.group === 'views' || c.group === 'replay') return true;
  if (c.group === 'coverage') {
    const spec = KERNELS.find((s) => c.name.startsWith(`${s.name} is implemented`));
    return spec !== undefined && families.has(spec.family);
  }
  return families.has(c.group);
});

// The PTX interpreter takes minutes for the whole suite (the real GPU runs it
// all, as does lavapipe for WebGPU): by default one valid case of every
// kernel × variant runs here, the smallest of at least SMALL_CASE_ELEMENTS
// elements (the kernels' own tests run the shapes each kernel treats
// specially), with every check that is no valid case;
// RAYO_FULL_CONFORMANCE=1 runs every check.
const full = process.env.RAYO_FULL_CONFORMANCE === '1';
const sample = sampleConformance(checks, 'variant', 'small');
const chosen = full ? checks : sample.checks;

describe('conformance of the implemented families on an emulated device', () => {
  afterAll(() => suite.teardown());
  it(`${full ? 'runs every check' : 'samples every kernel × variant'} of the implemented families`, () => {
    const pairs = new Set(
      checks.flatMap((c) => (c.kernelCase ? [`${c.kernelCase.kernel}\u0000${c.kernelCase.variant}`] : [])),
    );
    expect(sample.variants).toBe(pairs.size);
    expect(sample.kernels).toBe(new Set([...pairs].map((p) => p.split('\u0000')[0])).size);
    expect(chosen.length).toBe(full ? checks.length : sample.checks.length);
  });
  const groups = new Map<string, typeof checks>();
  for (const check of chosen) groups.set(check.group, [...(groups.get(check.group) ?? []), check]);
  for (const [group, list] of groups) {
    describe(group, () => {
      for (const check of list) it(check.name, (context) => runConformanceCheck(check, context));
    });
  }
});

// With one SM the grids are at most a few blocks, so every kernel's loop runs
// many times per thread (and the transpose's barriers guard tile reuse).
describe('kernels on a one-SM device, where grids are smaller than the work', () => {
  const small = new FakeLibCuda();
  small.attributes.set(CU_DEVICE_ATTRIBUTE.MULTIPROCESSOR_COUNT, 1);
  new PtxInterpreter(small).attach();
  const gpu = new CudaBackend(new CudaDriver(small));
  const cpu = createCpuBackend();
  afterAll(() => gpu.dispose());

  const cases: [string, AnyKernelSpec, Shape[], Record<string, number>][] = [
    ['transpose of 110 tiles', transpose, [[317, 331]], {}],
    ['batched transpose', transpose, [[5, 67, 45]], {}],
    ['add with a row broadcast', add, [[300, 70], [70]], {}],
    ['gelu', gelu, [[20_000]], {}],
    ['fill', fill, [[9000]], { value: -3 }],
    ['swigluBackward', swigluBackward, [[5000], [5000], [5000]], {}],
  ];
  for (const [name, spec, shapes, attrs] of cases) {
    it(name, async () => {
      const random = seededUniform(1, -4, 4);
      const data = shapes.map((s) => Float32Array.from({ length: s.reduce((a, b) => a * b, 1) }, random));
      const ins = data.map((d, i) => gpu.upload(d, shapes[i]!));
      const refs = data.map((d, i) => cpu.upload(d, shapes[i]!));
      const outs = gpu.run(spec, ins, attrs);
      const expected = cpu.run(spec, refs, attrs);
      for (let i = 0; i < outs.length; i++) {
        const got = await outs[i]!.read();
        const want = await expected[i]!.read();
        expect(compareOutputs('f32', got, want)).toBeUndefined();
      }
      for (const t of [...ins, ...refs, ...outs, ...expected]) t.dispose();
    });
  }
});
