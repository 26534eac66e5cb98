import type { TensorMapTiled } from '@rayo/cuda-ptx';
import type { FakeLibCuda } from '../fakeLibCuda.js';
import { fail } from './threads.js';

// Device memory as a launch sees it: allocations found by address, and access errors.

/** A live allocation as seen by one memory instruction: bounds and typed views. */
export class Window {
  generation = -1;
  start = 0;
  end = 0;
  words: Uint32Array = new Uint32Array(0);
  floats: Float32Array = new Float32Array(0);
  halves: Uint16Array = new Uint16Array(0);
}

interface Allocation {
  readonly start: number;
  readonly end: number;
  readonly words: Uint32Array;
  readonly floats: Float32Array;
  readonly halves: Uint16Array;
}

/** What the compiled steps read of the launch in progress. */
export class LaunchState {
  /** Bumped per launch, so that windows of an earlier launch (maybe freed since) are looked up again. */
  generation = 0;
  /** Each parameter's value as two words, in declaration order. */
  params: Uint32Array = new Uint32Array(0);
  /** Each tensor-map parameter's map, by parameter index. */
  tensorMaps: (TensorMapTiled | undefined)[] = [];
  clock = 0;
  readonly #allocations = new Map<number, Allocation>();

  constructor(private readonly fake: FakeLibCuda) {}

  begin(): void {
    this.generation++;
    this.#allocations.clear();
  }

  /** Points `w` at the allocation holding [address, address + bytes), or throws. */
  locate(w: Window, address: number, bytes: number, line: string): void {
    const found = this.fake.deviceView(BigInt(address), bytes);
    if (!found) fail(`${line}: ${bytes} bytes at 0x${address.toString(16)} are outside every allocation`);
    const start = address - found.offset;
    let a = this.#allocations.get(start);
    if (!a) {
      const { view } = found;
      if (view.byteOffset % 4 !== 0 || start % 16 !== 0)
        fail(`allocation at 0x${start.toString(16)} is misaligned`);
      const words = Math.floor(view.byteLength / 4);
      a = {
        start,
        end: start + view.byteLength,
        words: new Uint32Array(view.buffer, view.byteOffset, words),
        floats: new Float32Array(view.buffer, view.byteOffset, words),
        halves: new Uint16Array(view.buffer, view.byteOffset, Math.floor(view.byteLength / 2)),
      };
      this.#allocations.set(start, a);
    }
    w.generation = this.generation;
    w.start = a.start;
    w.end = a.end;
    w.words = a.words;
    w.floats = a.floats;
    w.halves = a.halves;
  }
}

export function misaligned(line: string, address: number, bytes: number): never {
  return fail(`${line}: address 0x${address.toString(16)} is not aligned to ${bytes} bytes`);
}

export function outsideShared(line: string, address: number, bytes: number, size: number): never {
  return fail(`${line}: ${bytes} bytes at shared address ${address} are outside the block's ${size} bytes`);
}
