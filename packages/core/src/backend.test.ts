import { describe, expect, it } from 'vitest';
import { createCpuBackend } from './cpu/backend.js';
import {
  BackendMismatchError,
  BackendUnavailableError,
  DisposedTensorError,
  DTypeError,
  InvalidArgumentError,
} from './errors.js';
import { add } from './kernels/elementwise.js';
import { createBackend, knownBackendNames, probeBackends } from './registry.js';

describe('tensors on the cpu backend', () => {
  it('dispose is idempotent, `using` disposes, and a disposed tensor cannot run', () => {
    const backend = createCpuBackend();
    const a = backend.upload([1, 2, 3], [3]);
    {
      using b = backend.upload([4, 5, 6], [3]);
      expect(b.disposed).toBe(false);
      a.dispose();
      a.dispose();
      expect(a.disposed).toBe(true);
      expect(() => backend.run(add, [a, b])).toThrow(DisposedTensorError);
    }
    expect(backend.memory().liveTensors).toBe(0);
  });

  it('names the operation and argument when a disposed tensor is run or written', () => {
    const backend = createCpuBackend();
    const a = backend.upload([1, 2, 3], [3]);
    const b = backend.upload([4, 5, 6], [3]);
    a.dispose();
    const live = { expected: 'a live tensor', actual: `disposed ${a.describe()}` };
    expect(() => backend.run(add, [b, a])).toThrow(
      expect.objectContaining({ operation: 'add', argument: 'b', ...live }),
    );
    expect(() => backend.write(a, [7, 8, 9])).toThrow(
      expect.objectContaining({ operation: 'write', argument: 'tensor', ...live }),
    );
    b.dispose();
  });

  it('names the kernel and argument for a tensor of another backend', () => {
    const one = createCpuBackend();
    const two = createCpuBackend();
    using a = one.upload([1], [1]);
    using b = two.upload([2], [1]);
    const error = (() => {
      try {
        one.run(add, [a, b]);
      } catch (e) {
        return e as BackendMismatchError;
      }
    })();
    expect(error).toBeInstanceOf(BackendMismatchError);
    expect(error?.kernel).toBe('add');
    expect(error?.argument).toBe('b');
    expect(error?.message).toContain('another instance');
  });

  it('rejects unknown attributes and typed arrays of the wrong class', () => {
    const backend = createCpuBackend();
    using a = backend.upload([1, 2], [2]);
    expect(() => backend.run(add, [a, a], { alpha: 1 } as never)).toThrow(InvalidArgumentError);
    expect(() => backend.upload(new Int32Array(2), [2], 'f32')).toThrow(DTypeError);
  });
});

describe('backend registry', () => {
  it('creates the cpu backend by name and knows the GPU backends', async () => {
    const cpu = await createBackend('cpu');
    expect(cpu.info.kind).toBe('cpu');
    expect(knownBackendNames()).toEqual(expect.arrayContaining(['cpu', 'wgpu', 'cuda']));
  });

  it('an unknown backend is an error that lists the known ones', async () => {
    await expect(createBackend('metal')).rejects.toThrow(BackendUnavailableError);
    await expect(createBackend('metal')).rejects.toThrow(/cpu \| .*wgpu/);
  });

  it('reports why each backend is or is not usable', async () => {
    const statuses = await probeBackends();
    const cpu = statuses.find((s) => s.name === 'cpu');
    expect(cpu?.available).toBe(true);
    for (const s of statuses) if (!s.available) expect(s.reason).toMatch(/\S/);
  });
});
