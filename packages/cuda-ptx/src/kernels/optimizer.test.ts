import {
  type AnyKernelSpec,
  adamwStep,
  clipByGlobalNorm,
  multiTensorAdamw,
  type Shape,
  sgdStep,
} from '@rayo/core';
import { compareOutputs } from '@rayo/core/testing';
import { itAssemblesForBothTargets, seededUniform, useEmulatedGpu } from '@rayo/cuda-testkit';
import { describe, expect, it } from 'vitest';
import type { Operand } from '../kernel.js';
import { ptxasTestGate } from '../ptx/ptxas.js';
import {
  CLIP_SLOTS,
  clipGroups,
  clipNormModule,
  clipScaleModule,
  clipSumSquaresModule,
} from './clipByGlobalNorm.js';
import {
  adamwConstants,
  adamwDeviceConstants,
  adamwKey,
  adamwModule,
  KERNEL_PARAM_BYTES,
  MULTI_ADAMW_CHUNK,
  MULTI_ADAMW_SLOTS,
  multiAdamwGroups,
  multiAdamwKey,
  multiAdamwModule,
  type SgdMode,
  sgdMode,
  sgdModule,
} from './optimizer.js';
import { type VectorWidth, vectorWidthFor } from './optimizerLoops.js';
import { lossScaleModule } from './optimizerLossScale.js';

function operand(ptr: bigint, size: number): Operand {
  return { ptr, size, shape: [size], dtype: 'f32', byteLength: 4 * size };
}

describe('optimizer kernels', () => {
  it('computes the bias corrections once per launch, on the host', () => {
    const c = adamwConstants({ lr: 0.01, beta1: 0.9, beta2: 0.999, eps: 1e-8, weightDecay: 0.1, step: 1 });
    expect(c.stepSize).toBeCloseTo(0.01 / 0.1, 12);
    expect(c.invSqrtBc2).toBeCloseTo(1 / Math.sqrt(0.001), 9);
    expect(c.oneMinusBeta2).toBeCloseTo(0.001, 15);
    expect(c.decay).toBeCloseTo(0.999, 15);
    const late = adamwConstants({
      lr: 0.01,
      beta1: 0.9,
      beta2: 0.999,
      eps: 1e-8,
      weightDecay: 0,
      step: 100_000,
    });
    expect(late.stepSize).toBeCloseTo(0.01, 12);
    expect(late.invSqrtBc2).toBeCloseTo(1, 12);
    expect(late.decay).toBe(1);
    // The element loop has no power, exp or log: only the square root and the division of the update.
    const text = adamwModule(4).emit();
    expect(text).not.toMatch(/ex2|lg2/);
    expect(text.match(/sqrt\.rn\.f32/g)).toHaveLength(4 + 1);
  });

  it('reads a device step and lr once per thread, before the element loop', () => {
    const both = { step: true, lr: true };
    expect(adamwKey(4, both)).not.toBe(adamwKey(4));
    expect(adamwKey(4, { step: true, lr: false })).not.toBe(adamwKey(4, { step: false, lr: true }));
    const names = adamwModule(4, both).entries[0]!.params.map((p) => p.name);
    expect(names).toContain('stepAt');
    expect(names).toContain('lrAt');
    expect(adamwModule(4, { step: false, lr: true }).entries[0]!.params.map((p) => p.name)).not.toContain(
      'stepAt',
    );
    const text = adamwModule(4, both).emit();
    expect(text.match(/ld\.global\.s32/g)).toHaveLength(1);
    // Two bias corrections: one e^x each; the element loop still has none.
    expect(text.match(/ex2\.approx/g)).toHaveLength(2);
    const c = adamwDeviceConstants({ lr: 0, beta1: 0, beta2: 0.999, eps: 1e-8, weightDecay: 0.1, step: 0 });
    expect(c.logBeta1).toBeLessThan(-1e29);
    expect(c.logBeta2).toBeCloseTo(Math.log(0.999), 15);
  });

  it('moves four floats per access where every operand is 16-byte aligned', () => {
    expect(vectorWidthFor([operand(256n, 5), operand(512n, 5)])).toBe(4);
    expect(vectorWidthFor([operand(256n, 5), operand(520n, 5)])).toBe(2);
    expect(vectorWidthFor([operand(256n, 5), operand(516n, 5)])).toBe(1);
    const text = adamwModule(4).emit();
    expect(text.match(/ld\.global\.v4\.f32/g)).toHaveLength(4);
    expect(text.match(/st\.global\.v4\.f32/g)).toHaveLength(3);
  });

  it('reads and writes the momentum buffer only with momentum', () => {
    expect(sgdMode({ momentum: 0, nesterov: false })).toBe('plain');
    expect(sgdMode({ momentum: 0.9, nesterov: false })).toBe('momentum');
    expect(sgdMode({ momentum: 0.9, nesterov: true })).toBe('nesterov');
    expect(sgdModule('plain', 1).entries[0]!.params.map((p) => p.name)).toEqual([
      'param',
      'grad',
      'n',
      'lr',
      'weightDecay',
    ]);
    expect(sgdModule('nesterov', 1).entries[0]!.params.map((p) => p.name)).toContain('buf');
  });

  it('groups gradients by vector width, at most CLIP_SLOTS per launch, empty ones dropped', () => {
    const aligned = Array.from({ length: CLIP_SLOTS + 3 }, (_, i) => operand(BigInt(4096 * (i + 1)), i + 1));
    const odd = operand(4n, 7);
    const empty = operand(8192n * 16n, 0);
    const groups = clipGroups([odd, ...aligned, empty], false);
    expect(groups.map((g) => [g.width, g.grads.length])).toEqual([
      [4, CLIP_SLOTS],
      [4, 3],
      [1, 1],
    ]);
    expect(groups[1]!.elements).toBe(CLIP_SLOTS + 1 + CLIP_SLOTS + 2 + CLIP_SLOTS + 3);
  });

  it('counts a gradient listed twice twice in the norm but scales it once', () => {
    const g = operand(256n, 10);
    expect(clipGroups([g, g], false)[0]!.grads).toHaveLength(2);
    expect(clipGroups([g, g], true)[0]!.grads).toHaveLength(1);
  });

  it('fits the most tensors of one multi-tensor launch into the kernel parameter limit', () => {
    const all = { step: true, lr: true, norm: true, lossScale: true };
    const bytes = (slots: number) =>
      multiAdamwModule(slots, 4, all).entries[0]!.params.reduce((sum, p) => sum + p.bytes, 0);
    expect(bytes(MULTI_ADAMW_SLOTS)).toBeLessThanOrEqual(KERNEL_PARAM_BYTES);
    expect(bytes(MULTI_ADAMW_SLOTS + 1)).toBeGreaterThan(KERNEL_PARAM_BYTES);
    // The pointers come first: no padding between parameters.
    const names = multiAdamwModule(2, 1, all).entries[0]!.params.map((p) => p.name);
    expect(names.slice(0, 12)).toEqual([
      'p0',
      'g0',
      'm0',
      'v0',
      'p1',
      'g1',
      'm1',
      'v1',
      'stepAt',
      'lrAt',
      'normAt',
      'lossScaleAt',
    ]);
    expect(multiAdamwKey(3, 4, all)).not.toBe(multiAdamwKey(3, 4, { ...all, norm: false }));
    expect(multiAdamwKey(3, 4, all)).not.toBe(multiAdamwKey(3, 4, { ...all, lossScale: false }));
  });

  it('splits many tensors into the fewest, evenly filled launches per vector width', () => {
    const quad = (ptr: bigint, size: number) =>
      [0, 1, 2, 3].map((r) => operand(ptr + BigInt(r) * 65536n, size));
    const quads = Array.from({ length: 150 }, (_, i) => quad(BigInt(256 * (i + 1)), i + 1));
    quads.push(quad(4n, 9), quad(8n, 9), quad(1024n, 0));
    const groups = multiAdamwGroups(quads);
    expect(groups.map((g) => [g.width, g.tensors.length])).toEqual([
      [4, 75],
      [4, 75],
      [2, 1],
      [1, 1],
    ]);
    expect(groups.flatMap((g) => g.tensors)).not.toContain(152);
    expect(MULTI_ADAMW_CHUNK % 4).toBe(0);
  });

  it('skips the scaling pass where the scale is exactly 1', () => {
    const text = clipScaleModule(2, 4).emit();
    expect(text).toMatch(/setp\.neu\.f32 %p\d+, %f\d+, 0f3F800000/);
  });
});

const gate = ptxasTestGate();

describe.skipIf(gate.skip)(`optimizer PTX assembles with ptxas (${gate.reason})`, () => {
  const widths: VectorWidth[] = [1, 2, 4];
  const modes: SgdMode[] = ['plain', 'momentum', 'nesterov'];
  const modules: [string, () => { emit(): string }][] = [
    ...widths.map((w) => [`adamwStep v${w}`, () => adamwModule(w)] as [string, () => { emit(): string }]),
    ...[
      { step: true, lr: true },
      { step: true, lr: false },
      { step: false, lr: true },
    ].map(
      (device) =>
        [`adamwStep v4, device step ${device.step}, lr ${device.lr}`, () => adamwModule(4, device)] as [
          string,
          () => { emit(): string },
        ],
    ),
    ['adamwStep v1, device step and lr', () => adamwModule(1, { step: true, lr: true })],
    // Half gradients under f32 parameters and moments.
    ...(['f16', 'bf16'] as const).flatMap((grad) =>
      widths.flatMap((w) => [
        [`adamwStep v${w}, ${grad} gradients`, () => adamwModule(w, undefined, grad)] as [
          string,
          () => { emit(): string },
        ],
        [`sgdStep nesterov v${w}, ${grad} gradients`, () => sgdModule('nesterov', w, grad)] as [
          string,
          () => { emit(): string },
        ],
        [
          `multiTensorAdamw 3 slots v${w}, ${grad} gradients`,
          () => multiAdamwModule(3, w, { step: true, lr: true, norm: true }, grad),
        ] as [string, () => { emit(): string }],
        [`clip sum of squares v${w}, ${grad}`, () => clipSumSquaresModule(CLIP_SLOTS, w, grad)] as [
          string,
          () => { emit(): string },
        ],
        [`clip scale v${w}, ${grad}`, () => clipScaleModule(CLIP_SLOTS, w, grad)] as [
          string,
          () => { emit(): string },
        ],
      ]),
    ),
    ...modes.flatMap((mode) =>
      ([1, 4] as const).map(
        (w) => [`sgdStep ${mode} v${w}`, () => sgdModule(mode, w)] as [string, () => { emit(): string }],
      ),
    ),
    ...[1, CLIP_SLOTS].flatMap((slots) =>
      ([1, 4] as const).flatMap((w) => [
        [`clip sum of squares, ${slots} slots, v${w}`, () => clipSumSquaresModule(slots, w)] as [
          string,
          () => { emit(): string },
        ],
        [`clip scale, ${slots} slots, v${w}`, () => clipScaleModule(slots, w)] as [
          string,
          () => { emit(): string },
        ],
      ]),
    ),
    ['clip norm', () => clipNormModule(true)],
    ['global norm', () => clipNormModule(false)],
    ...([1, 2, 4] as const).flatMap((w) =>
      [1, 7, MULTI_ADAMW_SLOTS].map(
        (slots) =>
          [
            `multiTensorAdamw, ${slots} slots, v${w}, device step, lr and norm`,
            () => multiAdamwModule(slots, w, { step: true, lr: true, norm: true }),
          ] as [string, () => { emit(): string }],
      ),
    ),
    [
      'multiTensorAdamw, 5 slots, v4, all on the host',
      () => multiAdamwModule(5, 4, { step: false, lr: false, norm: false }),
    ],
    [
      'multiTensorAdamw, 7 slots, v4, loss scaled',
      () => multiAdamwModule(7, 4, { step: true, lr: true, norm: true, lossScale: true }),
    ],
    ['updateLossScale with the step', () => lossScaleModule(true)],
    ['updateLossScale without the step', () => lossScaleModule(false)],
  ];
  itAssemblesForBothTargets('every optimizer and clipping module', modules);
});

// The pool's allocations are 256-byte aligned, so the conformance suite runs
// the `.v4` modules; operands offset by one or two floats take the others.
describe('optimizer kernels on an emulated device, with misaligned operands', () => {
  const { gpu, cpu } = useEmulatedGpu();

  const uniform = seededUniform(7, -2, 2);
  const random = (n: number) => Float32Array.from({ length: n }, uniform);

  /** A tensor whose first element sits `offset` floats past a 256-byte boundary. */
  function offsetTensor(data: Float32Array, shape: Shape, offset: number) {
    const base = gpu.upload(Float32Array.from([...new Array(offset).fill(0), ...data]), [
      offset + data.length,
    ]);
    return { base, tensor: gpu.importPointer(gpu.pointerOf(base).ptr + BigInt(4 * offset), shape) };
  }

  async function check(spec: AnyKernelSpec, shapes: Shape[], offsets: number[], attrs: object) {
    const data = shapes.map((s) => random(s.reduce((a, b) => a * b, 1)).map(Math.abs));
    const placed = data.map((d, i) => offsetTensor(d, shapes[i]!, offsets[i]!));
    const gpuIn = placed.map((p) => p.tensor);
    const cpuIn = data.map((d, i) => cpu.upload(d, shapes[i]!));
    const got = gpu.run(spec, gpuIn, attrs);
    const want = cpu.run(spec, cpuIn, attrs);
    for (let i = 0; i < got.length; i++) {
      expect(
        compareOutputs('f32', await got[i]!.read(), await want[i]!.read(), { rtol: 1e-5, atol: 1e-6 }),
        `output ${i}`,
      ).toBeUndefined();
    }
    for (const p of placed) p.base.dispose();
  }

  const adamw = { lr: 0.05, weightDecay: 0.1, step: 3 };
  it('adamwStep, one float per access', () =>
    check(adamwStep, [[1031], [1031], [1031], [1031]], [1, 0, 0, 0], adamw));
  it('adamwStep, two floats per access and a tail', () =>
    check(adamwStep, [[1031], [1031], [1031], [1031]], [2, 0, 2, 0], adamw));
  it('adamwStep with a device step and lr, two floats per access', async () => {
    for (const [step, lr] of [
      [1, 0.05],
      [7, 0.003],
      [1000, 0.05],
    ] as const) {
      const shape = [1031];
      const data = [0, 1, 2, 3].map(() => random(1031).map(Math.abs));
      const placed = data.map((d, i) => offsetTensor(d, shape, i % 2 === 0 ? 2 : 0));
      using stepT = gpu.upload(Int32Array.of(step), [1], 'i32');
      using lrT = gpu.upload(Float32Array.of(lr), [1]);
      const got = gpu.run(adamwStep, [...placed.map((p) => p.tensor), stepT, lrT], { weightDecay: 0.1 });
      const want = cpu.run(
        adamwStep,
        data.map((d) => cpu.upload(d, shape)),
        { lr, step, weightDecay: 0.1 },
      );
      for (let i = 0; i < got.length; i++) {
        expect(
          compareOutputs('f32', await got[i]!.read(), await want[i]!.read(), { rtol: 1e-5, atol: 1e-6 }),
          `step ${step}, output ${i}`,
        ).toBeUndefined();
      }
      for (const p of placed) p.base.dispose();
    }
  });
  it('sgdStep with Nesterov momentum, one float per access', () =>
    check(sgdStep, [[257], [257], [257]], [0, 0, 3], {
      lr: 0.1,
      momentum: 0.9,
      weightDecay: 0.5,
      nesterov: true,
    }));
  it('sgdStep without momentum ignores the buffer’s alignment', () =>
    check(sgdStep, [[257], [257], [257]], [2, 2, 1], { lr: 0.1, weightDecay: 0.5 }));
  it('clipByGlobalNorm over more tensors than one launch takes, mixed alignments', () => {
    const shapes: Shape[] = Array.from({ length: CLIP_SLOTS + 4 }, (_, i) => [3 + 5 * i]);
    return check(
      clipByGlobalNorm,
      shapes,
      shapes.map((_, i) => i % 3),
      { maxNorm: 0.5 },
    );
  });
  it('multiTensorAdamw over tensors of mixed alignments and sizes, more than one launch takes, clipped', async () => {
    const sizes = Array.from({ length: MULTI_ADAMW_SLOTS + 5 }, (_, i) =>
      i === 3 ? MULTI_ADAMW_CHUNK + 7 : 1 + 3 * i,
    );
    const shapes = sizes.flatMap((n) => [[n], [n], [n], [n]]);
    const offsets = shapes.map((_, i) =>
      Math.floor(i / 4) % 5 === 1 ? 1 : Math.floor(i / 4) % 5 === 2 ? 2 : 0,
    );
    const data = shapes.map((s) => random(s[0]!).map(Math.abs));
    const placed = data.map((d, i) => offsetTensor(d, shapes[i]!, offsets[i]!));
    using norm = gpu.upload(Float32Array.of(3), [1]);
    const attrs = { lr: 0.05, step: 3, weightDecay: sizes.map((_, j) => (j % 2) * 0.1), maxNorm: 1 };
    gpu.run(multiTensorAdamw, [undefined, undefined, norm, undefined, ...placed.map((p) => p.tensor)], attrs);
    const want = cpu.run(
      multiTensorAdamw,
      [
        undefined,
        undefined,
        cpu.upload(Float32Array.of(3), [1]),
        undefined,
        ...data.map((d, i) => cpu.upload(d, shapes[i]!)),
      ],
      attrs,
    );
    for (let j = 0; j < sizes.length; j++) {
      for (const [r, role] of [
        [0, 'param'],
        [2, 'm'],
        [3, 'v'],
      ] as const) {
        expect(
          compareOutputs(
            'f32',
            await placed[4 * j + r]!.tensor.read(),
            await want[3 * j + (r === 0 ? 0 : r - 1)]!.read(),
            {
              rtol: 1e-5,
              atol: 1e-6,
            },
          ),
          `${role}[${j}]`,
        ).toBeUndefined();
      }
    }
    for (const p of placed) p.base.dispose();
  });
  it('clipByGlobalNorm refuses a tensor listed twice (it would be scaled twice), naming it', () => {
    const placed = [offsetTensor(random(61), [61], 1), offsetTensor(random(13), [13], 0)];
    const [g, h] = placed.map((p) => p.tensor);
    expect(() => gpu.run(clipByGlobalNorm, [g, h, g], { maxNorm: 0.5 })).toThrow(
      expect.objectContaining({ argument: 'grads[2]' }),
    );
    for (const p of placed) p.base.dispose();
  });
});
