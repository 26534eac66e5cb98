import type { CudaDriver, DeviceCommand } from '@rayo/cuda-ptx';

// What both GEMM tools do around a product: seeded inputs and device timing.

/** `count` values from a 32-bit xorshift sequence seeded with `seed` (0 counts as 1), each word mapped by `toValue`. */
export function xorshiftValues(count: number, seed: number, toValue: (word: number) => number): Float32Array {
  const out = new Float32Array(count);
  let s = seed >>> 0 || 1;
  for (let i = 0; i < count; i++) {
    s ^= s << 13;
    s ^= s >>> 17;
    s ^= s << 5;
    out[i] = toValue(s >>> 0);
  }
  return out;
}

/** Milliseconds one run of `commands` takes on `stream`: events around `iters` back-to-back runs after two warm-up runs. */
export function timeCommands(
  driver: CudaDriver,
  stream: bigint,
  commands: readonly DeviceCommand[],
  iters: number,
): number {
  for (let i = 0; i < 2; i++) driver.enqueue(commands, stream);
  driver.synchronize(stream);
  const start = driver.createEvent();
  const end = driver.createEvent();
  try {
    driver.recordEvent(start, stream);
    for (let i = 0; i < iters; i++) driver.enqueue(commands, stream);
    driver.recordEvent(end, stream);
    driver.synchronize(stream);
    return driver.elapsedMs(start, end) / iters;
  } finally {
    driver.destroyEvent(start);
    driver.destroyEvent(end);
  }
}
