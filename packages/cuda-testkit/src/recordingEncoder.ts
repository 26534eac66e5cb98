import { DEFAULT_CUDA_TUNING, type DeviceProperties, type KernelEncoder, type Launch } from '@rayo/cuda-ptx';

/** An encoder that records what a kernel launches and fills instead of running it. */
export interface RecordingEncoder {
  readonly encoder: KernelEncoder;
  readonly launches: Launch[];
  /** fill32 calls: destination, word, count. */
  readonly fills: [bigint, number, number][];
}

/**
 * A recording encoder for `device` with the default tuning; scratch memory
 * is handed out in 256-byte multiples from `scratchFrom` on.
 */
export function recordingEncoder(device: DeviceProperties, scratchFrom: bigint): RecordingEncoder {
  const launches: Launch[] = [];
  const fills: [bigint, number, number][] = [];
  let next = scratchFrom;
  const scratch = (bytes: number): bigint => {
    const ptr = next;
    next += BigInt(Math.ceil(bytes / 256) * 256);
    return ptr;
  };
  const encoder: KernelEncoder = {
    device,
    tuning: DEFAULT_CUDA_TUNING,
    launch: (l) => launches.push(l),
    copy: () => {},
    fill32: (dst, word, count) => fills.push([dst, word, count]),
    tensorMap: () => new Uint8Array(128),
    scratch,
    completionCounters: (words) => {
      const ptr = scratch(4 * words);
      fills.push([ptr, 0, words]);
      return ptr;
    },
  };
  return { encoder, launches, fills };
}
