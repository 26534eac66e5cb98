import { type Backend, createCpuBackend, type HostArray, multiTensorAdamw, type Shape } from '@rayo/core';
import { compareOutputs, Rng } from '@rayo/core/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { WgpuBackend } from '../backend.js';
import { requestWgpuDevice } from '../device.js';
import { backendProvider } from '../index.js';
import { MULTI_SLOTS, multiAdamwShader, multiAdamwSlots } from './multiTensorAdamw.js';

const unavailable = await backendProvider.probe();
const needsAdapter = unavailable && process.env.CI !== 'true' ? describe.skip : describe;

describe('multiTensorAdamw dispatches', () => {
  const all = { step: true, lr: true, norm: true };

  it('binds as many tensors as the storage-buffer limit leaves room for', () => {
    // WebGPU's default of 8: the device step, lr and norm leave one tensor per dispatch.
    expect(multiAdamwSlots(8, all)).toBe(1);
    expect(multiAdamwSlots(8, { step: false, lr: false, norm: false })).toBe(2);
    expect(multiAdamwSlots(10, { step: true, lr: true, norm: false })).toBe(2);
    expect(multiAdamwSlots(1_000_000, all)).toBe(MULTI_SLOTS);
  });

  it('declares four storage bindings per tensor, then the device values and the parameters', () => {
    const code = multiAdamwShader(3, all).code();
    expect(code.match(/var<storage, read_write>/g)).toHaveLength(9);
    expect(code.match(/var<storage, read>/g)).toHaveLength(6);
    expect(code).toMatch(/@binding\(15\) var<uniform> params/);
    expect(multiAdamwShader(3, all).key).not.toBe(multiAdamwShader(3, { ...all, norm: false }).key);
  });

  it('binds the loss scale as one more input and tests the norm only under it', () => {
    const scaled = { ...all, lossScale: true };
    expect(multiAdamwSlots(9, scaled)).toBe(1);
    expect(multiAdamwSlots(12, scaled)).toBe(2);
    const code = multiAdamwShader(3, scaled).code();
    expect(code.match(/var<storage, read>/g)).toHaveLength(7);
    expect(code).toContain('lossScaleAt[0]');
    expect(code).toContain('0x7f800000u');
    expect(multiAdamwShader(3, all).code()).not.toContain('0x7f800000u');
    expect(multiAdamwShader(3, scaled).key).not.toBe(multiAdamwShader(3, all).key);
  });
});

// A device at WebGPU's default limits: 8 storage buffers per stage, so with
// the device step, lr and norm every tensor takes its own dispatch.
needsAdapter('multiTensorAdamw on a device with the default storage-buffer limit', () => {
  let gpu: WgpuBackend;
  let device: GPUDevice;
  const cpu = createCpuBackend();
  beforeAll(async () => {
    const { gpu: entry } = await requestWgpuDevice();
    const adapter = await entry!.requestAdapter();
    device = await adapter!.requestDevice();
    gpu = await WgpuBackend.create({ device });
  });
  afterAll(() => {
    gpu.dispose();
    // A device passed in stays its owner's to destroy.
    device.destroy();
  });

  it('matches the cpu backend over 11 tensors, clipped, step and lr on the device', async () => {
    expect(gpu.device.limits.maxStorageBuffersPerShaderStage).toBe(8);
    const rng = new Rng(17);
    const shapes: Shape[] = Array.from({ length: 11 }, (_, j) => (j === 4 ? [1500] : [j + 1, 3]));
    const data = shapes.flatMap((shape) => {
      const n = shape.reduce((a, b) => a * b, 1);
      return [0, 1, 2, 3].map((r) =>
        Float32Array.from({ length: n }, () => (r === 3 ? rng.uniform(0.5, 1.5) : rng.uniform(-1, 1))),
      );
    });
    const tensorShapes = shapes.flatMap((s) => [s, s, s, s]);
    const fixed = (backend: Backend) => [
      backend.upload(Int32Array.of(5), [1], 'i32'),
      backend.upload(Float32Array.of(0.02), [1]),
      backend.upload(Float32Array.of(3), []),
      undefined,
    ];
    const attrs = { weightDecay: shapes.map((_, j) => (j % 3) * 0.1), maxNorm: 1.5 };
    const inputs = data.map((d, i) => gpu.upload(d, tensorShapes[i]!));
    gpu.run(multiTensorAdamw, [...fixed(gpu), ...inputs], attrs);
    const expected = cpu.run(
      multiTensorAdamw,
      [...fixed(cpu), ...data.map((d, i) => cpu.upload(d, tensorShapes[i]!))],
      attrs,
    );
    for (let j = 0; j < shapes.length; j++) {
      for (const [k, r] of [0, 2, 3].entries()) {
        const mismatch = compareOutputs(
          'f32',
          (await inputs[4 * j + r]!.read()) as HostArray,
          await expected[3 * j + k]!.read(),
          {
            rtol: 1e-5,
            atol: 1e-6,
          },
        );
        expect(mismatch, `tensor ${j}, input ${r}`).toBeUndefined();
      }
    }
  });
});
