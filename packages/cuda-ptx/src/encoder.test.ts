import { InvalidArgumentError } from '@rayo/core';
import { FakeLibCuda } from '@rayo/cuda-testkit';
import { describe, expect, it } from 'vitest';
import { CudaDriver } from './driver/driver.js';
import { CommandRecorder } from './encoder.js';
import type { Launch, Operand } from './kernel.js';
import { PtxModule } from './ptx/module.js';

function setup() {
  const fake = new FakeLibCuda();
  const driver = new CudaDriver(fake);
  return { fake, driver, recorder: new CommandRecorder(driver) };
}

const module = () => {
  const m = new PtxModule();
  m.entry('k', { x: 'ptr', n: 'u32', alpha: 'f32' }, () => {});
  return m;
};

const operand: Operand = { ptr: 0x7f00_0000_0000n, size: 4, shape: [4], dtype: 'f32', byteLength: 16 };

function launch(overrides: Partial<Launch> = {}): Launch {
  return {
    key: 'test/k',
    module,
    entry: 'k',
    grid: 4,
    block: 128,
    args: { x: operand, n: 4, alpha: 0.5 },
    ...overrides,
  };
}

function rejection(fn: () => void): InvalidArgumentError {
  try {
    fn();
  } catch (error) {
    expect(error).toBeInstanceOf(InvalidArgumentError);
    return error as InvalidArgumentError;
  }
  throw new Error('expected an InvalidArgumentError');
}

describe('CommandRecorder', () => {
  it('records a launch with the loaded function and checked values', () => {
    const { recorder } = setup();
    recorder.launch(launch({ grid: [4, 2], block: [32, 4, 1] }));
    expect(recorder.commands).toHaveLength(1);
    const c = recorder.commands[0]!;
    expect(c.kind).toBe('launch');
    if (c.kind !== 'launch') return;
    expect(c.fn.entry).toBe('k');
    expect(c.grid).toEqual([4, 2, 1]);
    expect(c.block).toEqual([32, 4, 1]);
    expect(c.values).toEqual([0x7f00_0000_0000n, 4, 0.5]);
  });

  it('names missing, unknown and ill-typed arguments', () => {
    const { recorder } = setup();
    const missing = rejection(() => recorder.launch(launch({ args: { x: operand, n: 4 } })));
    expect([missing.operation, missing.argument]).toEqual(['test/k', 'args.alpha']);
    const extra = rejection(() => recorder.launch(launch({ args: { x: operand, n: 4, alpha: 1, beta: 2 } })));
    expect([extra.argument, extra.expected]).toEqual(['args.beta', "parameters of 'k': x, n, alpha"]);
    const typed = rejection(() => recorder.launch(launch({ args: { x: operand, n: -1, alpha: 1 } })));
    expect(typed.argument).toBe('args.n');
    const pointer = rejection(() => recorder.launch(launch({ args: { x: 1.5, n: 1, alpha: 1 } })));
    expect(pointer.argument).toBe('args.x');
    expect(recorder.commands).toHaveLength(0);
  });

  it('checks launch dimensions and shared memory against the device', () => {
    const { recorder } = setup();
    expect(rejection(() => recorder.launch(launch({ grid: 0 }))).argument).toBe('grid');
    expect(rejection(() => recorder.launch(launch({ grid: [1, 70_000] }))).argument).toBe('grid');
    expect(rejection(() => recorder.launch(launch({ block: 1.5 }))).argument).toBe('block');
    const threads = rejection(() => recorder.launch(launch({ block: [64, 32] })));
    expect([threads.argument, threads.expected, threads.actual]).toEqual([
      'block',
      'at most 1024 threads',
      '2048 ([64, 32, 1])',
    ]);
    expect(rejection(() => recorder.launch(launch({ sharedBytes: 228 * 1024 }))).argument).toBe(
      'sharedBytes',
    );
  });

  it('opts into large dynamic shared memory when recording, not when enqueueing', () => {
    const { fake, recorder } = setup();
    recorder.launch(launch({ sharedBytes: 96 * 1024 }));
    expect(fake.calls).toContain('cuFuncSetAttribute');
  });

  it('records copies and fills, leaving out empty ones', () => {
    const { recorder } = setup();
    recorder.copy(1n, 2n, 0);
    recorder.fill32(1n, 0, 0);
    recorder.copy(1n, 2n, 8);
    recorder.fill32(1n, -1, 3);
    expect(recorder.commands).toEqual([
      { kind: 'copy', src: 1n, dst: 2n, bytes: 8 },
      { kind: 'fill32', dst: 1n, word: 0xffffffff, count: 3 },
    ]);
    expect(rejection(() => recorder.copy(1n, 2n, -4)).argument).toBe('bytes');
    expect(rejection(() => recorder.fill32(1n, 2 ** 32, 1)).argument).toBe('word');
  });

  it('hands out scratch memory from the pool and keeps it for its owner to release', () => {
    const { driver, recorder } = setup();
    const a = recorder.scratch(1000);
    const b = recorder.scratch(10);
    expect(a).not.toBe(b);
    expect(recorder.scratchBuffers.map((s) => s.bytes)).toEqual([1024, 512]);
    // Both carved from one cached segment.
    expect(driver.counts().allocations).toBe(1);
  });
});
