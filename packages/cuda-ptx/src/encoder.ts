import { InvalidArgumentError, type ScratchArena } from '@rayo/core';
import type {
  CudaDriver,
  DeviceCommand,
  DeviceProperties,
  Dim3Tuple,
  LoadedFunction,
} from './driver/driver.js';
import { checkParamValue, type ParamValue } from './driver/params.js';
import type { DeviceBuffer } from './driver/pool.js';
import type { TensorMapTiled } from './driver/tensorMap.js';
import type { KernelEncoder, Launch, LaunchDim, LaunchValue, Operand } from './kernel.js';
import { type CudaTuning, DEFAULT_CUDA_TUNING } from './tuning.js';

function isOperand(value: LaunchValue): value is Operand {
  return (
    typeof value === 'object' &&
    value !== null &&
    !(value instanceof Uint8Array) &&
    typeof value.ptr === 'bigint'
  );
}

function describe(value: unknown): string {
  if (Array.isArray(value)) return `[${value.join(', ')}]`;
  return typeof value === 'bigint' ? `${value}n` : String(value);
}

/**
 * Records what kernels ask for as device commands: modules are loaded and
 * arguments checked now, so that mistakes surface at `run` (not at a later
 * submit) and so that nothing but enqueueing is left for the moment the
 * commands go to the stream or into a graph being captured.
 */
export class CommandRecorder implements KernelEncoder {
  readonly commands: DeviceCommand[] = [];
  /** Scratch allocations made by the recorded kernels outside an arena; the owner releases them. */
  readonly scratchBuffers: DeviceBuffer[] = [];

  /**
   * With `arena` (a batch's), scratch comes from it and stays the arena's;
   * with `counters` (the backend's), completion counters come from there,
   * else from scratch zeroed before the launches that use them.
   */
  constructor(
    private readonly driver: CudaDriver,
    readonly tuning: CudaTuning = DEFAULT_CUDA_TUNING,
    private readonly arena?: ScratchArena<DeviceBuffer>,
    private readonly counters?: (words: number) => bigint,
  ) {}

  get device(): DeviceProperties {
    return this.driver.device;
  }

  launch(l: Launch): void {
    const kernel = typeof l.key === 'string' && l.key !== '' ? l.key : 'launch';
    const device = this.driver.device;
    const grid = this.#dims(kernel, 'grid', l.grid, device.maxGridDim);
    const block = this.#dims(kernel, 'block', l.block, device.maxBlockDim);
    const threads = block[0] * block[1] * block[2];
    if (threads > device.maxThreadsPerBlock) {
      throw new InvalidArgumentError('too many threads per block', {
        operation: kernel,
        argument: 'block',
        expected: `at most ${device.maxThreadsPerBlock} threads`,
        actual: `${threads} ([${block.join(', ')}])`,
      });
    }
    const sharedBytes = l.sharedBytes ?? 0;
    if (!Number.isInteger(sharedBytes) || sharedBytes < 0 || sharedBytes > device.sharedMemoryPerBlockOptin) {
      throw new InvalidArgumentError('dynamic shared memory out of range', {
        operation: kernel,
        argument: 'sharedBytes',
        expected: `an integer in [0, ${device.sharedMemoryPerBlockOptin}]`,
        actual: describe(sharedBytes),
      });
    }
    const fn = this.driver.loadFunction(kernel, l.entry, l.module);
    const args = l.args as Readonly<Record<string, LaunchValue | undefined>>;
    const names = paramNames(fn);
    for (const name in args) {
      if (names.has(name)) continue;
      const extra = Object.keys(args).filter((other) => !names.has(other));
      throw new InvalidArgumentError('argument for a parameter the entry does not have', {
        operation: kernel,
        argument: `args.${extra[0]}`,
        expected: `parameters of '${fn.entry}': ${[...names].join(', ') || 'none'}`,
        actual: extra.join(', '),
      });
    }
    const values: ParamValue[] = fn.params.map((param) => {
      const value = args[param.name];
      if (value === undefined) {
        throw new InvalidArgumentError('missing kernel argument', {
          operation: kernel,
          argument: `args.${param.name}`,
          expected: `a value for .${param.type} parameter '${param.name}' of '${fn.entry}'`,
          actual: 'nothing',
        });
      }
      return checkParamValue(kernel, param, isOperand(value) ? value.ptr : value);
    });
    this.driver.allowDynamicShared(fn, sharedBytes);
    this.commands.push({ kind: 'launch', fn, grid, block, sharedBytes, values });
  }

  tensorMap(tensor: TensorMapTiled): Uint8Array {
    return this.driver.encodeTensorMap(tensor);
  }

  copy(src: bigint, dst: bigint, bytes: number): void {
    this.#count('copy', 'bytes', bytes);
    if (bytes === 0) return;
    this.commands.push({ kind: 'copy', src, dst, bytes });
  }

  fill32(dst: bigint, word: number, count: number): void {
    this.#count('fill32', 'count', count);
    if (!Number.isInteger(word) || word < -(2 ** 31) || word > 2 ** 32 - 1) {
      throw new InvalidArgumentError('a 32-bit word is expected', {
        operation: 'fill32',
        argument: 'word',
        expected: 'an integer in [-2^31, 2^32)',
        actual: describe(word),
      });
    }
    if (count === 0) return;
    this.commands.push({ kind: 'fill32', dst, word: word >>> 0, count });
  }

  scratch(bytes: number): bigint {
    this.#count('scratch', 'bytes', bytes);
    if (this.arena) return this.arena.take(bytes).ptr;
    const buffer = this.driver.alloc(bytes);
    this.scratchBuffers.push(buffer);
    return buffer.ptr;
  }

  completionCounters(words: number): bigint {
    this.#count('completionCounters', 'words', words);
    if (this.counters) return this.counters(words);
    const ptr = this.scratch(4 * Math.max(1, words));
    this.fill32(ptr, 0, words);
    return ptr;
  }

  #count(kernel: string, argument: string, value: number): void {
    if (!Number.isSafeInteger(value) || value < 0) {
      throw new InvalidArgumentError('a non-negative integer is expected', {
        operation: kernel,
        argument,
        expected: 'an integer >= 0',
        actual: describe(value),
      });
    }
  }

  #dims(kernel: string, argument: string, value: LaunchDim, max: Dim3Tuple): Dim3Tuple {
    const list = typeof value === 'number' ? [value] : Array.isArray(value) ? [...value] : [];
    const full = [list[0], list[1] ?? 1, list[2] ?? 1] as const;
    const ok =
      list.length >= 1 &&
      list.length <= 3 &&
      full.every((d, i) => typeof d === 'number' && Number.isInteger(d) && d >= 1 && d <= max[i]!);
    if (!ok) {
      throw new InvalidArgumentError(`invalid ${argument} dimensions`, {
        operation: kernel,
        argument,
        expected: `1 to 3 integers, each from 1 to [${max.join(', ')}]`,
        actual: describe(value),
      });
    }
    return full as unknown as Dim3Tuple;
  }
}

/** The parameter names of each loaded function, made once: every launch checks its arguments against them. */
const PARAM_NAMES = new WeakMap<LoadedFunction, ReadonlySet<string>>();

function paramNames(fn: LoadedFunction): ReadonlySet<string> {
  let names = PARAM_NAMES.get(fn);
  if (!names) {
    names = new Set(fn.params.map((p) => p.name));
    PARAM_NAMES.set(fn, names);
  }
  return names;
}
