import { type Backend, PART_CHECKSUM_BLOCK_BYTES, type QuantizedWeight, type Tensor } from '@rayo/core';

// Kept weights checked where they were uploaded: a backend that computes
// core's part checksums on its device (wgpu's) hashes the uploaded parts
// there, so the host only reads and copies them. Checks run as the tensors
// are uploaded; the load waits for all of them at its end.

/** A backend that computes part checksums on its device. */
export interface ChecksummingBackend extends Backend {
  partChecksums(tensors: readonly Tensor[]): Promise<Uint32Array>;
}

/** `backend` where it computes part checksums on its device (and can bind a checksum block), else undefined. */
export function checksummingBackend(backend: Backend): ChecksummingBackend | undefined {
  const candidate = backend as Partial<ChecksummingBackend> & { maxBindingBytes?: number };
  if (typeof candidate.partChecksums !== 'function') return undefined;
  if ((candidate.maxBindingBytes ?? Number.POSITIVE_INFINITY) < PART_CHECKSUM_BLOCK_BYTES) return undefined;
  return backend as ChecksummingBackend;
}

/** The part of a quantized weight a checksum is kept for. */
export type WeightPart = 'packed' | 'scales' | 'zeros' | 'offsets';

/** A part's kept checksum. */
export interface ExpectedChecksum {
  readonly part: WeightPart;
  readonly checksum: number;
}

/** A part whose bytes on the device are not what was kept. */
export interface PartMismatch {
  /** `tensor.part`. */
  readonly what: string;
  readonly expected: number;
  readonly actual: number;
}

/** The checks of one load's uploaded parts, begun as each tensor is uploaded. */
export class DevicePartChecks {
  readonly #pending: Promise<PartMismatch | undefined>[] = [];

  /** Begins checking tensor `name`'s uploaded parts against `expected`. */
  check(
    backend: ChecksummingBackend,
    name: string,
    weight: QuantizedWeight,
    expected: readonly ExpectedChecksum[],
  ): void {
    const tensors = expected.map(({ part }) => weight[part]!);
    const checked = backend.partChecksums(tensors).then((sums) => {
      const at = expected.findIndex(({ checksum }, i) => sums[i] !== checksum);
      if (at < 0) return undefined;
      return { what: `${name}.${expected[at]!.part}`, expected: expected[at]!.checksum, actual: sums[at]! };
    });
    // Met by `settle`; a rejection meanwhile is not unhandled.
    checked.catch(() => {});
    this.#pending.push(checked);
  }

  /** The first mismatch of the checks begun so far (once all are done), or undefined; rejects as a check did. */
  async settle(): Promise<PartMismatch | undefined> {
    const results = await Promise.all(this.#pending);
    return results.find((r) => r !== undefined);
  }
}
